//! The HTTP API's bearer token (`--http-token-file`): `/v1/*` and
//! `/metrics` answer only requests carrying `Authorization: Bearer TOKEN`;
//! `/healthz` and `/readyz` stay open for probes, and the gRPC API is
//! untouched (Envoy's rate limit filter sends no credentials).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use tollgate_http::digest_bytes;

use crate::metrics;

/// The token, kept as its digest: never shown in a log or a `Debug`, and
/// compared digest to digest, so the time a comparison takes says nothing
/// about how much of a guess was right.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken([u8; 16]);

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(***)")
    }
}

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be read.
    #[error("cannot read the token file {file}: {source}")]
    Read {
        /// The file, as given.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no token, or one that cannot be a header's value.
    #[error("the token file {0} must hold one token of visible ASCII characters")]
    Invalid(String),
}

impl ApiToken {
    /// The token `text` holds (surrounding white space, such as the final
    /// newline of a file, ignored).
    pub fn new(text: &str) -> Option<Self> {
        let token = text.trim();
        let visible = !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic());
        visible.then(|| ApiToken(digest_bytes(token.as_bytes())))
    }

    /// The token in the file at `path`.
    pub fn from_file(path: &Path) -> Result<Self, TokenError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
            file: file.clone(),
            source,
        })?;
        ApiToken::new(&text).ok_or(TokenError::Invalid(file))
    }

    /// Whether `authorization` is `Bearer` with this token (RFC 6750; the
    /// scheme's case ignored).
    fn admits(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(value) = authorization.and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let Some((scheme, token)) = value.split_once(' ') else {
            return false;
        };
        scheme.eq_ignore_ascii_case("bearer") && digest_bytes(token.trim().as_bytes()) == self.0
    }
}

/// Passes requests with the token on; answers the others 401.
pub(crate) async fn require(
    State(token): State<Arc<ApiToken>>,
    request: Request,
    next: Next,
) -> Response {
    if token.admits(request.headers().get(header::AUTHORIZATION)) {
        return next.run(request).await;
    }
    metrics::refused("unauthorized");
    let body = serde_json::json!({
        "error": "this endpoint needs `Authorization: Bearer TOKEN` (the server's --http-token-file)",
        "field": null,
    });
    let mut response = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"tollgate\""),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        let token = ApiToken::new("s3cret\n").unwrap();
        let admits = |v: &str| token.admits(Some(&HeaderValue::from_str(v).unwrap()));
        assert!(admits("Bearer s3cret"));
        assert!(admits("bearer s3cret"));
        assert!(!admits("Bearer s3cre"));
        assert!(!admits("Basic s3cret"));
        assert!(!admits("s3cret"));
        assert!(!token.admits(None));
        assert_eq!(format!("{token:?}"), "ApiToken(***)");
        assert!(ApiToken::new(" \n").is_none());
        assert!(ApiToken::new("two words").is_none());
    }
}
