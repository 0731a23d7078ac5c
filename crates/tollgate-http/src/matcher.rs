//! Which requests a rule applies to: [`Matcher`].
//!
//! ```
//! use tollgate_http::Matcher;
//!
//! let chat = Matcher::any().methods(["POST"]).route("/v1/chat/{model}");
//! let v1 = Matcher::any().path_prefix("/v1");
//! # let _ = (chat, v1);
//! ```

use serde::Deserialize;

use crate::view::Reads;
use crate::RequestView;

/// A rule's matcher: every condition given must hold; none given matches
/// every request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Matcher {
    /// Methods (any case); empty matches every method.
    pub methods: Vec<String>,
    /// A route template in axum's syntax (`/v1/users/{id}`,
    /// `/files/{*path}`): compared with axum's `MatchedPath` when the
    /// request has one, otherwise matched segment by segment against the
    /// path.
    pub route: Option<String>,
    /// A path prefix ending at a segment boundary: `/v1` matches `/v1` and
    /// `/v1/x`, not `/v10`.
    pub path_prefix: Option<String>,
    /// A host, exact (`api.example.com`) or a suffix after `*.`
    /// (`*.example.com`), case ignored.
    pub host: Option<String>,
}

impl Matcher {
    /// Matches every request.
    pub fn any() -> Self {
        Matcher::default()
    }

    /// Only these methods.
    pub fn methods<S: Into<String>>(mut self, methods: impl IntoIterator<Item = S>) -> Self {
        self.methods = methods.into_iter().map(Into::into).collect();
        self
    }

    /// Only this route template.
    pub fn route(mut self, template: impl Into<String>) -> Self {
        self.route = Some(template.into());
        self
    }

    /// Only paths under this prefix.
    pub fn path_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.path_prefix = Some(prefix.into());
        self
    }

    /// Only this host.
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// The view's optional parts matching reads.
    pub(crate) fn reads(&self) -> Reads {
        Reads {
            host: self.host.is_some(),
            route: self.route.is_some(),
            labels: false,
        }
    }

    /// Whether the rule applies to `view`.
    pub fn matches(&self, view: &RequestView<'_>) -> bool {
        (self.methods.is_empty()
            || self
                .methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(view.method)))
            && self.route.as_deref().map_or(true, |t| match view.route {
                Some(route) => route == t,
                None => template_matches(t, view.path),
            })
            && self
                .path_prefix
                .as_deref()
                .map_or(true, |p| under(p, view.path))
            && self
                .host
                .as_deref()
                .map_or(true, |h| view.host.is_some_and(|got| host_matches(h, got)))
    }
}

fn under(prefix: &str, path: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            host.len() > suffix.len() + 1
                && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
                && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
        }
        None => pattern.eq_ignore_ascii_case(host),
    }
}

/// `/v1/{id}` against `/v1/42`; `{*rest}` takes the remaining segments.
pub(crate) fn template_matches(template: &str, path: &str) -> bool {
    let mut want = template.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some(w), Some(_)) if w.starts_with("{*") => return true,
            (Some(w), Some(g)) if w.starts_with('{') && w.ends_with('}') && !g.is_empty() => {}
            (Some(w), Some(g)) if w == g => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn view<'a>(
        h: &'a HeaderMap,
        method: &'a str,
        path: &'a str,
        route: Option<&'a str>,
    ) -> RequestView<'a> {
        RequestView {
            method,
            path,
            query: None,
            host: Some("api.example.com"),
            headers: h,
            peer: None,
            route,
            labels: None,
        }
    }

    #[test]
    fn conditions() {
        let h = HeaderMap::new();
        let get = view(&h, "GET", "/v1/chat/gpt", None);
        assert!(Matcher::any().matches(&get));
        assert!(Matcher::any().methods(["get"]).matches(&get));
        assert!(!Matcher::any().methods(["POST"]).matches(&get));
        assert!(Matcher::any().route("/v1/chat/{model}").matches(&get));
        assert!(!Matcher::any().route("/v1/chat").matches(&get));
        assert!(Matcher::any().route("/v1/{*rest}").matches(&get));
        assert!(!Matcher::any().route("/v1/chat/{m}/x").matches(&get));
        assert!(Matcher::any().path_prefix("/v1").matches(&get));
        assert!(Matcher::any().path_prefix("/v1/").matches(&get));
        assert!(!Matcher::any().path_prefix("/v").matches(&get));
        assert!(Matcher::any().host("*.example.com").matches(&get));
        assert!(Matcher::any().host("API.example.com").matches(&get));
        assert!(!Matcher::any().host("*.api.example.com").matches(&get));
        assert!(!Matcher::any().host("other.com").matches(&get));
        // A matched route template is compared as is.
        let routed = view(&h, "GET", "/v1/chat/gpt", Some("/v1/chat/{model}"));
        assert!(Matcher::any().route("/v1/chat/{model}").matches(&routed));
        assert!(!Matcher::any().route("/v1/chat/{m}").matches(&routed));
    }

    #[test]
    fn config_names() {
        let m: Matcher =
            serde_json::from_str(r#"{"methods":["POST"],"path_prefix":"/v1"}"#).unwrap();
        assert_eq!(m, Matcher::any().methods(["POST"]).path_prefix("/v1"));
        assert!(serde_json::from_str::<Matcher>(r#"{"paths":"/"}"#).is_err());
    }
}
