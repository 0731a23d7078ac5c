//! [`Routes`]: a request path to its route template, where no router says
//! which route matched (plain hyper services, access logs).
//!
//! The templates given are tried in order with the [`Matcher`](crate::Matcher)'s
//! own segment rules (`/v1/users/{id}`, `/files/{*path}`); a path none of
//! them matches gets a default template in which every segment that names
//! one item rather than a route is collapsed: all digits to `{id}`, a UUID to
//! `{uuid}`, a long hexadecimal string (16 digits or more) to `{hex}`.
//!
//! ```
//! use tollgate_http::Routes;
//!
//! let routes = Routes::new(["/v1/users/{name}/repos"])?;
//! assert_eq!(routes.route("/v1/users/ada/repos"), "/v1/users/{name}/repos");
//! assert_eq!(routes.route("/v1/orders/1234"), "/v1/orders/{id}");
//! assert_eq!(
//!     routes.route("/v1/orders/0f8fad5b-d9cb-469f-a165-70867728950e/items"),
//!     "/v1/orders/{uuid}/items"
//! );
//! # Ok::<(), tollgate_http::RouteError>(())
//! ```

use std::borrow::Cow;

use crate::matcher::template_matches;

/// Route templates, tried in order, then the default collapsing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes {
    templates: Vec<String>,
}

/// A template that cannot match any path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("route template `{}` must start with `/`", .0.escape_debug())]
pub struct RouteError(pub String);

impl Routes {
    /// These templates (in axum's syntax), tried in order.
    pub fn new<S: Into<String>>(
        templates: impl IntoIterator<Item = S>,
    ) -> Result<Self, RouteError> {
        let templates: Vec<String> = templates.into_iter().map(Into::into).collect();
        if let Some(bad) = templates.iter().find(|t| !t.starts_with('/')) {
            return Err(RouteError(bad.clone()));
        }
        Ok(Routes { templates })
    }

    /// The route template of `path` (without its query).
    pub fn route<'a>(&'a self, path: &'a str) -> Cow<'a, str> {
        if let Some(t) = self.templates.iter().find(|t| template_matches(t, path)) {
            return Cow::Borrowed(t);
        }
        if !path.split('/').any(|s| collapsed(s).is_some()) {
            return Cow::Borrowed(path);
        }
        let parts: Vec<&str> = path.split('/').map(|s| collapsed(s).unwrap_or(s)).collect();
        Cow::Owned(parts.join("/"))
    }
}

/// The placeholder a segment collapses to, if it names an item.
fn collapsed(segment: &str) -> Option<&'static str> {
    let b = segment.as_bytes();
    if !b.is_empty() && b.iter().all(u8::is_ascii_digit) {
        return Some("{id}");
    }
    let uuid = b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        });
    if uuid {
        return Some("{uuid}");
    }
    (b.len() >= 16 && b.iter().all(u8::is_ascii_hexdigit)).then_some("{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_first_then_collapsing() {
        let r = Routes::new(["/files/{*path}", "/v1/{id}/x"]).unwrap();
        assert_eq!(r.route("/files/a/b/c"), "/files/{*path}");
        assert_eq!(r.route("/v1/abc/x"), "/v1/{id}/x");
        assert_eq!(r.route("/v2/abc/x"), "/v2/abc/x");
        assert_eq!(r.route("/"), "/");
        assert_eq!(r.route("/a/42/b/007"), "/a/{id}/b/{id}");
        assert_eq!(r.route("/blob/0123456789abcdef0123"), "/blob/{hex}");
        assert_eq!(r.route("/blob/0123456789abcde"), "/blob/0123456789abcde");
        assert_eq!(
            r.route("/u/0F8FAD5B-D9CB-469F-A165-70867728950E"),
            "/u/{uuid}"
        );
    }

    #[test]
    fn a_template_must_be_a_path() {
        assert_eq!(Routes::new(["v1/{id}"]), Err(RouteError("v1/{id}".into())));
    }
}
