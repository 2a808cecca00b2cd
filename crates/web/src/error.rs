//! Failures as HTTP answers: `{"error": {code, message, detail, refused}}` (the CLI's
//! `--json` error shape, the serialized [`Failure`]) with the status that says the same
//! thing to an HTTP client. The one place exit codes become HTTP statuses.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use warden_core::failure::{ExitCode, Failure};

/// A failure on its way to the client, with the HTTP status it is sent with.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, as every front end reports it.
    pub failure: Failure,
}

/// The HTTP status of a failure: a refusal by the rules is 422 (the request was
/// understood and the rules say no), not found 404, usage 400, a conflict (safe to
/// retry) 409, anything else 500.
pub fn status_of(f: &Failure) -> StatusCode {
    match f.code {
        ExitCode::Refused => StatusCode::UNPROCESSABLE_ENTITY,
        ExitCode::Usage => StatusCode::BAD_REQUEST,
        ExitCode::NotFound => StatusCode::NOT_FOUND,
        ExitCode::Conflict => StatusCode::CONFLICT,
        ExitCode::Ok | ExitCode::Internal | ExitCode::NeedsPerson | ExitCode::StuckOrDead => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

impl ApiError {
    /// A refusal by the console itself (token, CSRF, limits), with its own status.
    pub fn refused(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            failure: Failure::refusal(ExitCode::Usage, message),
        }
    }
}

impl From<Failure> for ApiError {
    fn from(failure: Failure) -> Self {
        ApiError {
            status: status_of(&failure),
            failure,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.failure });
        let mut r = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"warden\""),
            );
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        let check = |f: Failure, s: StatusCode| assert_eq!(status_of(&f), s, "{f}");
        check(Failure::refused("no"), StatusCode::UNPROCESSABLE_ENTITY);
        check(Failure::usage("bad"), StatusCode::BAD_REQUEST);
        check(Failure::not_found("gone"), StatusCode::NOT_FOUND);
        check(Failure::conflict("again"), StatusCode::CONFLICT);
        check(Failure::internal("oops"), StatusCode::INTERNAL_SERVER_ERROR);
        // A guard Warden could not start is refused with exit 5: Warden's fault.
        check(
            Failure::refusal(ExitCode::Internal, "guard"),
            StatusCode::INTERNAL_SERVER_ERROR,
        );
    }
}
