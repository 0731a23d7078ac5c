//! Where a load test sends its requests: an `http://` URL resolved once,
//! refused unless every address it resolves to is loopback (127.0.0.0/8,
//! ::1) or the caller allows remote targets.

use std::net::SocketAddr;

use http::uri::{Authority, PathAndQuery, Uri};

use crate::Error;

/// A resolved target.
#[derive(Clone, Debug)]
pub struct Target {
    /// The URL as given.
    pub url: String,
    /// The address every connection goes to.
    pub addr: SocketAddr,
    /// The `Host` header.
    pub authority: Authority,
    /// The request target.
    pub path: PathAndQuery,
}

impl Target {
    /// Parses and resolves `url`.
    pub async fn resolve(url: &str, allow_remote: bool) -> Result<Self, Error> {
        let bad = |why: &str| Error::Target(format!("`{url}`: {why}"));
        let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(bad(&format!(
                    "scheme `{other}` is not supported; use http://"
                )))
            }
            None => return Err(bad("expected http://HOST[:PORT][/PATH]")),
        }
        let authority = uri.authority().cloned().ok_or_else(|| bad("no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("user information in the URL is not supported"));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = authority.port_u16().unwrap_or(80);
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| bad(&format!("cannot resolve: {e}")))?
            .collect();
        let first = *addrs.first().ok_or_else(|| bad("resolves to no address"))?;
        if !allow_remote {
            if let Some(remote) = addrs.iter().find(|a| !a.ip().is_loopback()) {
                return Err(bad(&format!(
                    "{} is not a loopback address; load-testing another machine needs \
                     --allow-remote (and its owner's consent)",
                    remote.ip()
                )));
            }
        }
        let path = uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        Ok(Target {
            url: url.to_string(),
            addr: first,
            authority,
            path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn loopback_targets_resolve() {
        let t = Target::resolve("http://127.0.0.1:8000/v1/x?y=1", false)
            .await
            .unwrap();
        assert_eq!(t.addr, "127.0.0.1:8000".parse().unwrap());
        assert_eq!(t.path.as_str(), "/v1/x?y=1");
        assert_eq!(t.authority.as_str(), "127.0.0.1:8000");
        let t = Target::resolve("http://[::1]:9", false).await.unwrap();
        assert_eq!(t.path.as_str(), "/");
        assert!(t.addr.ip().is_loopback());
        assert!(Target::resolve("http://localhost:9/", false).await.is_ok());
    }

    #[tokio::test]
    async fn remote_and_malformed_targets_are_refused() {
        for (url, says) in [
            ("http://192.0.2.1:80/", "--allow-remote"),
            ("http://10.0.0.1/", "--allow-remote"),
            ("https://127.0.0.1/", "not supported"),
            ("127.0.0.1:80", "expected http://"),
            ("http://u:p@127.0.0.1/", "user information"),
            ("not a url", "not a URL"),
        ] {
            let err = Target::resolve(url, false).await.unwrap_err().to_string();
            assert!(err.contains(says), "{url}: {err}");
        }
        // Allowed, it resolves (no traffic is sent by resolving a literal).
        assert!(Target::resolve("http://192.0.2.1:80/", true).await.is_ok());
    }
}
