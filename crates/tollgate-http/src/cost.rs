//! What a request costs: [`Cost`] up front, and [`Reconcile`] for costs known
//! only once the response is ready (LLM tokens).
//!
//! ```
//! use tollgate_http::{Cost, Reconcile, ReportedCost};
//!
//! // Charge 500 tokens up front; the handler reports the real count with
//! // `response.extensions_mut().insert(ReportedCost(1234))`.
//! let estimate = Cost::Constant(500);
//! let settle = Reconcile::Extension;
//! # let _ = (estimate, settle, ReportedCost(0));
//! ```

use std::fmt;
use std::sync::Arc;

use http::{HeaderMap, HeaderName};
use serde::Deserialize;

use crate::key::header_name;
use crate::view::Reads;
use crate::RequestView;

/// A cost computed by a function of the request.
pub type CostFn = Arc<dyn Fn(&RequestView<'_>) -> Result<u64, CostError> + Send + Sync>;

/// How much of the budget a request spends.
#[derive(Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Cost {
    /// The same for every request (1 by default).
    Constant(u64),
    /// A decimal number in a request header; a request without it, or with
    /// something else in it, is refused with a 400.
    Header(#[serde(deserialize_with = "header_name")] HeaderName),
    /// The body's declared length in bytes; a request without
    /// `Content-Length` (a chunked upload) is refused with a 411.
    ContentLength,
    /// Any function of the request.
    #[serde(skip)]
    With(CostFn),
}

impl Default for Cost {
    fn default() -> Self {
        Cost::Constant(1)
    }
}

impl fmt::Debug for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cost::Constant(n) => write!(f, "Constant({n})"),
            Cost::Header(h) => write!(f, "Header({h})"),
            Cost::ContentLength => f.write_str("ContentLength"),
            Cost::With(_) => f.write_str("With(..)"),
        }
    }
}

/// Why a request's cost could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    /// The header the cost is read from is missing.
    #[error("the request has no `{0}` header to read its cost from")]
    Missing(HeaderName),
    /// The header is not a decimal number of at most 2^64 - 1.
    #[error("the `{0}` header must be a whole number from 0 to 18446744073709551615")]
    Invalid(HeaderName),
    /// The cost is the body's length and the request does not declare one.
    #[error("the request must declare its Content-Length")]
    NoLength,
    /// A custom cost function refused the request.
    #[error("{0}")]
    Refused(String),
}

impl Cost {
    /// Any function of the request.
    pub fn with(
        f: impl Fn(&RequestView<'_>) -> Result<u64, CostError> + Send + Sync + 'static,
    ) -> Cost {
        Cost::With(Arc::new(f))
    }

    /// The view's optional parts the cost reads: all of them for a
    /// function, which may read anything.
    pub(crate) fn reads(&self) -> Reads {
        match self {
            Cost::With(_) => Reads::ALL,
            Cost::Constant(_) | Cost::Header(_) | Cost::ContentLength => Reads::default(),
        }
    }

    /// The cost of `view`, at least `min` unless the operator fixed it
    /// ([`Cost::Constant`]): a client never chooses a free pass.
    pub fn at_least(&self, min: u64, view: &RequestView<'_>) -> Result<u64, CostError> {
        match self {
            Cost::Constant(n) => Ok(*n),
            _ => self.of(view).map(|cost| cost.max(min)),
        }
    }

    /// The cost of `view`.
    pub fn of(&self, view: &RequestView<'_>) -> Result<u64, CostError> {
        match self {
            Cost::Constant(n) => Ok(*n),
            Cost::Header(name) => {
                number(view.headers, name)?.ok_or_else(|| CostError::Missing(name.clone()))
            }
            Cost::ContentLength => number(view.headers, &http::header::CONTENT_LENGTH)
                .ok()
                .flatten()
                .ok_or(CostError::NoLength),
            Cost::With(f) => f(view),
        }
    }
}

/// The decimal number in header `name`, `None` when absent.
pub(crate) fn number(headers: &HeaderMap, name: &HeaderName) -> Result<Option<u64>, CostError> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| CostError::Invalid(name.clone()))?
        .trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CostError::Invalid(name.clone()));
    }
    text.parse()
        .map(Some)
        .map_err(|_| CostError::Invalid(name.clone()))
}

/// Where the real cost of a request is found once its response is ready.
/// The estimate charged up front is then settled: the difference refunded,
/// or the extra force-charged (the key may go into debt, and its next
/// requests wait until it is repaid).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Reconcile {
    /// A [`ReportedCost`] the handler put in the response's extensions.
    Extension,
    /// A decimal number in a response header, which the layer removes
    /// before the response leaves.
    Header(#[serde(deserialize_with = "header_name")] HeaderName),
}

/// The real cost of a request, set by the handler in the response's
/// extensions for rules that [`Reconcile::Extension`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportedCost(pub u64);

impl Reconcile {
    /// The cost `response` reports: `None` if the handler reported none (or
    /// something unreadable), in which case the estimate stands.
    pub(crate) fn read<B>(&self, response: &http::Response<B>) -> Option<u64> {
        match self {
            Reconcile::Extension => response.extensions().get::<ReportedCost>().map(|c| c.0),
            Reconcile::Header(name) => number(response.headers(), name).ok().flatten(),
        }
    }

    /// Removes the internal header, so it never reaches the client.
    pub(crate) fn strip<B>(&self, response: &mut http::Response<B>) {
        if let Reconcile::Header(name) = self {
            response.headers_mut().remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view_with(headers: &HeaderMap) -> RequestView<'_> {
        RequestView {
            method: "POST",
            path: "/",
            query: None,
            host: None,
            headers,
            peer: None,
            route: None,
            labels: None,
        }
    }

    #[test]
    fn costs_from_the_request() {
        let mut h = HeaderMap::new();
        h.insert("x-cost", "42".parse().unwrap());
        h.insert("content-length", "1000".parse().unwrap());
        let v = view_with(&h);
        let name = HeaderName::from_static("x-cost");
        assert_eq!(Cost::default().of(&v), Ok(1));
        assert_eq!(Cost::Header(name.clone()).of(&v), Ok(42));
        assert_eq!(Cost::ContentLength.of(&v), Ok(1000));
        assert_eq!(Cost::with(|v| Ok(v.path.len() as u64)).of(&v), Ok(1));
        let other = HeaderName::from_static("x-other");
        assert_eq!(
            Cost::Header(other.clone()).of(&v),
            Err(CostError::Missing(other))
        );
        for bad in ["-1", "1.5", "", "18446744073709551616", "0x10"] {
            h.insert("x-cost", bad.parse().unwrap());
            assert_eq!(
                Cost::Header(name.clone()).of(&view_with(&h)),
                Err(CostError::Invalid(name.clone())),
                "{bad}"
            );
        }
        assert_eq!(
            Cost::ContentLength.of(&view_with(&HeaderMap::new())),
            Err(CostError::NoLength)
        );
    }

    #[test]
    fn reported_costs() {
        let mut r = http::Response::new(());
        assert_eq!(Reconcile::Extension.read(&r), None);
        r.extensions_mut().insert(ReportedCost(7));
        assert_eq!(Reconcile::Extension.read(&r), Some(7));
        r.headers_mut().insert("x-tokens", "9".parse().unwrap());
        let from_header = Reconcile::Header(HeaderName::from_static("x-tokens"));
        assert_eq!(from_header.read(&r), Some(9));
        from_header.strip(&mut r);
        assert!(
            r.headers().get("x-tokens").is_none(),
            "the internal header does not leave"
        );
    }

    #[test]
    fn config_names() {
        let c: Cost = serde_json::from_str(r#"{"header":"X-Cost"}"#).unwrap();
        assert!(matches!(c, Cost::Header(h) if h == "x-cost"));
        let c: Cost = serde_json::from_str(r#""content_length""#).unwrap();
        assert!(matches!(c, Cost::ContentLength));
        let r: Reconcile = serde_json::from_str(r#""extension""#).unwrap();
        assert_eq!(r, Reconcile::Extension);
    }
}
