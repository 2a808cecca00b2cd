//! The dependency graph between plans: breaking cycles and ordering plans.
//!
//! Warden schedules tasks over a DAG, so a cycle in what GSD files declare (a plan that
//! depends, through others, on itself) must not reach it. GSD refuses a phase with a
//! cycle; a reader cannot refuse a whole tree for one bad edge, so it drops the edge
//! that closes each cycle, found by a depth-first search in the tree's own order (so
//! the same files always lose the same edge), and says so in a warning.

/// Finds the edges that close a cycle, in a graph of `n` nodes where `deps[i]` lists
/// the nodes `i` depends on. Visits nodes and their dependencies in index order;
/// iterative, so a long chain cannot overflow the stack.
pub fn cycle_edges(n: usize, deps: &[Vec<usize>]) -> Vec<(usize, usize)> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnStack,
        Done,
    }
    let mut mark = vec![Mark::New; n];
    let mut out = Vec::new();
    for start in 0..n {
        if mark.get(start) != Some(&Mark::New) {
            continue;
        }
        // (node, index of the next dependency to visit)
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        if let Some(m) = mark.get_mut(start) {
            *m = Mark::OnStack;
        }
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let edges = deps.get(node).map_or(&[][..], Vec::as_slice);
            if let Some(&dep) = edges.get(*next) {
                *next += 1;
                match mark.get(dep) {
                    Some(Mark::New) => {
                        if let Some(m) = mark.get_mut(dep) {
                            *m = Mark::OnStack;
                        }
                        stack.push((dep, 0));
                    }
                    Some(Mark::OnStack) => out.push((node, dep)),
                    _ => {}
                }
            } else {
                if let Some(m) = mark.get_mut(node) {
                    *m = Mark::Done;
                }
                stack.pop();
            }
        }
    }
    out
}

/// Orders `nodes` so that every node comes after the nodes it depends on (among
/// `nodes`), choosing among the ready ones the smallest `key` each time (Kahn's
/// algorithm with a heap: O(E + N log N)). Expects an acyclic graph; nodes left over by
/// a cycle are appended in key order anyway.
pub fn topo_order<K: Ord>(
    nodes: &[usize],
    deps: &[Vec<usize>],
    key: impl Fn(usize) -> K,
) -> Vec<usize> {
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashMap, HashSet};
    let inside: HashSet<usize> = nodes.iter().copied().collect();
    let mut indegree: HashMap<usize, usize> = HashMap::new();
    let mut dependents: HashMap<usize, Vec<usize>> = HashMap::new();
    for &x in &inside {
        let own: HashSet<usize> = deps
            .get(x)
            .map(|d| {
                d.iter()
                    .copied()
                    .filter(|y| inside.contains(y) && *y != x)
                    .collect()
            })
            .unwrap_or_default();
        indegree.insert(x, own.len());
        for y in own {
            dependents.entry(y).or_default().push(x);
        }
    }
    let mut heap: BinaryHeap<Reverse<(K, usize)>> = inside
        .iter()
        .filter(|x| indegree.get(x) == Some(&0))
        .map(|&x| Reverse((key(x), x)))
        .collect();
    let mut out = Vec::with_capacity(inside.len());
    let mut placed: HashSet<usize> = HashSet::new();
    while let Some(Reverse((_, x))) = heap.pop() {
        if !placed.insert(x) {
            continue;
        }
        out.push(x);
        for &d in dependents.get(&x).map_or(&[][..], Vec::as_slice) {
            if let Some(n) = indegree.get_mut(&d) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    heap.push(Reverse((key(d), d)));
                }
            }
        }
    }
    // Only reachable with a cycle, which callers break first.
    let mut rest: Vec<usize> = inside.into_iter().filter(|x| !placed.contains(x)).collect();
    rest.sort_by_key(|&x| (key(x), x));
    out.extend(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_edge_that_closes_a_cycle() {
        // 0 → 1 → 2 → 0, and 3 → 3.
        let deps = vec![vec![1], vec![2], vec![0], vec![3]];
        assert_eq!(cycle_edges(4, &deps), vec![(2, 0), (3, 3)]);
        assert!(cycle_edges(3, &[vec![], vec![0], vec![0, 1]]).is_empty());
        // Out-of-range indices are ignored, not a panic.
        assert!(cycle_edges(1, &[vec![7]]).is_empty());
    }

    #[test]
    fn orders_dependencies_first_then_by_key() {
        // Plan 0 (wave 2) depends on plan 4 (wave 1), as repco's 13-01 on 13-05.
        let deps = vec![vec![4], vec![0], vec![1], vec![2], vec![]];
        let order = topo_order(&[0, 1, 2, 3, 4], &deps, |x| x);
        assert_eq!(order, vec![4, 0, 1, 2, 3]);
        let order = topo_order(&[2, 0, 1], &[vec![], vec![], vec![]], |x| x);
        assert_eq!(order, vec![0, 1, 2]);
    }

    #[test]
    fn long_chains_do_not_overflow() {
        let n = 100_000;
        let deps: Vec<Vec<usize>> = (0..n)
            .map(|i| if i == 0 { vec![] } else { vec![i - 1] })
            .collect();
        assert!(cycle_edges(n, &deps).is_empty());
    }
}
