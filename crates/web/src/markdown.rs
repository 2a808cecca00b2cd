//! TASK.md sections as safe HTML. Agents write TASK.md, so its text is hostile input:
//! raw HTML (blocks and inline) is shown as escaped text, links keep only `http`,
//! `https` and `mailto` targets, and images become their alt text and address (the page
//! never loads anything from another host). Everything else is pulldown-cmark's own
//! escaping HTML writer.

use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd, html};

/// Escapes text for an HTML body or a double-quoted attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Is `url` a link the console may offer: `http(s)://` or `mailto:`, nothing else (no
/// `javascript:`, `data:`, relative paths that mean nothing outside the worktree)?
fn safe_link(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|p| lower.starts_with(p))
        && !url.chars().any(|c| c.is_control())
}

/// `s` without the parts inside `<!-- … -->`; `in_comment` carries an open comment from
/// one raw HTML line to the next.
fn strip_comments(s: &str, in_comment: &mut bool) -> String {
    let mut out = String::new();
    let mut rest = s;
    loop {
        if *in_comment {
            match rest.find("-->") {
                Some(end) => {
                    *in_comment = false;
                    rest = &rest[end + 3..];
                }
                None => return out,
            }
        } else {
            match rest.find("<!--") {
                Some(start) => {
                    out.push_str(&rest[..start]);
                    *in_comment = true;
                    rest = &rest[start + 4..];
                }
                None => {
                    out.push_str(rest);
                    return out;
                }
            }
        }
    }
}

/// Renders a section's markdown to HTML that runs nothing and loads nothing.
pub fn render(markdown: &str) -> String {
    let opts = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    // Which links were kept, so each end tag matches its start.
    let mut kept: Vec<bool> = Vec::new();
    // Inside an HTML comment that spans lines (TASK.md's placeholders are comments).
    let mut in_comment = false;
    let events = Parser::new_ext(markdown, opts).filter_map(|e| {
        Some(match e {
            // Comments are hidden, as every markdown viewer hides them and as the gates
            // ignore them; any other raw HTML is text, which the writer escapes.
            Event::Html(s) | Event::InlineHtml(s) => {
                let rest = strip_comments(&s, &mut in_comment);
                if rest.trim().is_empty() {
                    return None;
                }
                Event::Text(CowStr::from(rest))
            }
            Event::Start(Tag::Link { dest_url, .. }) => {
                let ok = safe_link(&dest_url);
                kept.push(ok);
                if ok {
                    Event::Html(CowStr::from(format!(
                        "<a href=\"{}\" rel=\"noopener noreferrer nofollow\" target=\"_blank\">",
                        escape(dest_url.trim())
                    )))
                } else {
                    Event::Html(CowStr::Borrowed("<span class=\"link\">"))
                }
            }
            Event::End(TagEnd::Link) => {
                if kept.pop().unwrap_or(false) {
                    Event::Html(CowStr::Borrowed("</a>"))
                } else {
                    Event::Html(CowStr::Borrowed("</span>"))
                }
            }
            // An image would make the browser fetch its address: show its alt text and the
            // address as text instead.
            Event::Start(Tag::Image { dest_url, .. }) => Event::Html(CowStr::from(format!(
                "<span class=\"image\" title=\"{}\">image: ",
                escape(&dest_url)
            ))),
            Event::End(TagEnd::Image) => Event::Html(CowStr::Borrowed("</span>")),
            e => e,
        })
    });
    let mut out = String::with_capacity(markdown.len() + markdown.len() / 4);
    html::push_html(&mut out, events);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(md: &str, want: &str) {
        assert_eq!(render(md), want, "markdown {md:?}");
    }

    #[test]
    fn formatting_survives() {
        check(
            "**bold** and `code`",
            "<p><strong>bold</strong> and <code>code</code></p>\n",
        );
        check("- a\n- b\n", "<ul>\n<li>a</li>\n<li>b</li>\n</ul>\n");
        check(
            "```\n<b>x</b>\n```\n",
            "<pre><code>&lt;b&gt;x&lt;/b&gt;\n</code></pre>\n",
        );
    }

    #[test]
    fn html_is_text() {
        check(
            "<script>window.pwned=1</script>",
            "&lt;script&gt;window.pwned=1&lt;/script&gt;",
        );
        check(
            "hi <img src=x onerror=\"window.pwned=1\"> there",
            // Quotes need no escaping in body text.
            "<p>hi &lt;img src=x onerror=\"window.pwned=1\"&gt; there</p>\n",
        );
        check(
            "<div onclick=\"x()\">\n\nbody\n\n</div>\n",
            "&lt;div onclick=\"x()\"&gt;\n<p>body</p>\n&lt;/div&gt;\n",
        );
        check("<!-- hidden -->", "");
        check("a <!-- hidden --> b", "<p>a  b</p>\n");
        check("<!-- one\ntwo -->\n\ntext", "<p>text</p>\n");
        check(
            "<!-- x --><script>y</script>",
            "&lt;script&gt;y&lt;/script&gt;",
        );
        check(
            "`<!-- code -->`",
            "<p><code>&lt;!-- code --&gt;</code></p>\n",
        );
    }

    #[test]
    fn only_web_links_are_links() {
        check(
            "[ok](https://example.com/a?b=1&c=\"2\")",
            "<p><a href=\"https://example.com/a?b=1&amp;c=&quot;2&quot;\" rel=\"noopener noreferrer nofollow\" target=\"_blank\">ok</a></p>\n",
        );
        check(
            "[x](javascript:alert(1))",
            "<p><span class=\"link\">x</span></p>\n",
        );
        check(
            "[x](JavaScript:alert(1)) <javascript:alert(1)>",
            "<p><span class=\"link\">x</span> <span class=\"link\">javascript:alert(1)</span></p>\n",
        );
        check(
            "[x](data:text/html,hi)",
            "<p><span class=\"link\">x</span></p>\n",
        );
        check(
            "[x](../src/main.rs)",
            "<p><span class=\"link\">x</span></p>\n",
        );
    }

    #[test]
    fn images_load_nothing() {
        check(
            "![alt \"text\"](http://evil.example/x.png)",
            "<p><span class=\"image\" title=\"http://evil.example/x.png\">image: alt \"text\"</span></p>\n",
        );
        check(
            "![a](x\" onerror=\"alert(1))",
            "<p>![a](x\" onerror=\"alert(1))</p>\n",
        );
    }

    #[test]
    fn never_panics_on_odd_input() {
        for md in [
            "",
            "\0",
            "[",
            "](",
            "<",
            "```",
            "[a]: <javascript:x>\n[a]",
            "\r\n\r\n",
        ] {
            let out = render(md);
            assert!(!out.contains("<script"), "{out}");
        }
    }
}
