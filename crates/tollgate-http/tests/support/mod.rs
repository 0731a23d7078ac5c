//! A real server on 127.0.0.1:0 and a real HTTP client for the tests, and an
//! independent reading of the rate-limit fields (the `sfv` crate's
//! Structured Fields parser, not ours).

#![allow(dead_code)] // each test file uses a different part

use std::net::SocketAddr;

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

/// Serves `app` on a free local port, with the peer address available to
/// the layer.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// An HTTP/1.1 client with keep-alive.
pub struct Http {
    client: Client<HttpConnector, Empty<Bytes>>,
    addr: SocketAddr,
}

/// What came back.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

impl Http {
    pub fn to(addr: SocketAddr) -> Self {
        Http {
            client: Client::builder(TokioExecutor::new()).build_http(),
            addr,
        }
    }

    pub async fn get(&self, path: &str, headers: &[(&str, &[u8])]) -> Answer {
        self.send("GET", path, headers).await
    }

    pub async fn send(&self, method: &str, path: &str, headers: &[(&str, &[u8])]) -> Answer {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self
            .client
            .request(request.body(Empty::new()).unwrap())
            .await
            .unwrap();
        let (parts, body) = response.into_parts();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body: body.collect().await.unwrap().to_bytes(),
        }
    }
}

/// One member of a RateLimit or RateLimit-Policy list, read by `sfv`: its
/// name and integer parameters.
#[derive(Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub params: Vec<(String, i64)>,
}

impl Member {
    pub fn param(&self, name: &str) -> Option<i64> {
        self.params.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

/// Parses a list field with `sfv`, panicking if it is not valid Structured
/// Fields or a member is not a string item.
pub fn members(value: &str) -> Vec<Member> {
    let list = sfv::Parser::parse_list(value.as_bytes())
        .unwrap_or_else(|e| panic!("`{value}` is not a Structured Fields list: {e}"));
    list.into_iter()
        .map(|entry| match entry {
            sfv::ListEntry::Item(item) => Member {
                name: item.bare_item.as_str().expect("a string name").to_string(),
                params: item
                    .params
                    .iter()
                    .filter_map(|(k, v)| v.as_int().map(|i| (k.clone(), i)))
                    .collect(),
            },
            sfv::ListEntry::InnerList(_) => panic!("inner list in `{value}`"),
        })
        .collect()
}
