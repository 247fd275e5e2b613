//! Shared helpers for the fake GitHub's integration tests: a world fixture and a minimal raw
//! HTTP/1.1 client (full control over headers, sees aborted bodies) over a loopback socket.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rm_testkit::{FakeConfig, FakeGitHub, InstallationRepos};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A fake with user `octo` owning `octo/hello` (installed), org `acme` (octo admin) with
/// `acme/api` (installed, all repos), and a token for octo.
pub struct World {
    pub gh: FakeGitHub,
    pub token: String,
}

pub async fn world() -> World {
    world_with(FakeConfig::default()).await
}

pub async fn world_with(config: FakeConfig) -> World {
    let gh = FakeGitHub::start(config).await.unwrap();
    gh.create_user("octo").unwrap();
    gh.create_repo("octo/hello").unwrap();
    gh.create_installation("octo", InstallationRepos::All)
        .unwrap();
    gh.create_org("acme").unwrap();
    gh.add_org_member("acme", "octo", true).unwrap();
    gh.create_repo("acme/api").unwrap();
    gh.create_installation("acme", InstallationRepos::All)
        .unwrap();
    let token = gh.issue_token("octo").unwrap().access_token;
    World { gh, token }
}

pub fn octocrab(base: &str, token: &str) -> octocrab::Octocrab {
    octocrab::Octocrab::builder()
        .base_uri(base)
        .unwrap()
        .user_access_token(token.to_string())
        .build()
        .unwrap()
}

#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The body arrived in full (false when the server aborted the connection).
    pub complete: bool,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends one request (`Connection: close`) and reads the whole answer.
pub async fn raw(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Raw {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut buf = Vec::new();
    // A reset connection is a legitimate outcome (DropConnection); keep what arrived.
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await;
    parse(&buf)
}

fn parse(buf: &[u8]) -> Raw {
    let Some(split) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        // The server closed the connection before a full header block: status 0, incomplete.
        return Raw {
            status: 0,
            headers: Vec::new(),
            body: buf.to_vec(),
            complete: false,
        };
    };
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &buf[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    if chunked {
        let mut body = Vec::new();
        let mut i = 0;
        loop {
            let Some(nl) = rest[i..].windows(2).position(|w| w == b"\r\n") else {
                return Raw {
                    status,
                    headers,
                    body,
                    complete: false,
                };
            };
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[i..i + nl]).trim(), 16)
                .unwrap_or(0);
            i += nl + 2;
            if size == 0 {
                return Raw {
                    status,
                    headers,
                    body,
                    complete: true,
                };
            }
            if rest.len() < i + size {
                body.extend_from_slice(&rest[i..]);
                return Raw {
                    status,
                    headers,
                    body,
                    complete: false,
                };
            }
            body.extend_from_slice(&rest[i..i + size]);
            i += size + 2;
        }
    }
    let cl = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok());
    let complete = cl.is_none_or(|n| rest.len() == n);
    Raw {
        status,
        headers,
        body: rest.to_vec(),
        complete,
    }
}

/// GET with the usual GitHub client headers.
pub async fn get(addr: SocketAddr, target: &str, token: &str) -> Raw {
    let auth = format!("Bearer {token}");
    raw(
        addr,
        "GET",
        target,
        &[
            ("Authorization", &auth),
            ("User-Agent", "rm-testkit-tests"),
            ("Accept", "application/vnd.github+json"),
            ("X-GitHub-Api-Version", "2022-11-28"),
        ],
        b"",
    )
    .await
}

/// Sends `body` as JSON (`Value::Null` = no body), with a bearer token if given: the broker and
/// control endpoints, which need none of the REST client headers.
pub async fn send_json(
    addr: SocketAddr,
    method: &str,
    target: &str,
    bearer: Option<&str>,
    body: &serde_json::Value,
) -> Raw {
    let auth = bearer.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(auth) = &auth {
        headers.push(("Authorization", auth.as_str()));
    }
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    raw(addr, method, target, &headers, &body).await
}

/// GET with a token, a User-Agent and the given extra headers only (no Accept or API version),
/// for the conditional and header-sensitive cases.
pub async fn get_with(addr: SocketAddr, target: &str, token: &str, extra: &[(&str, &str)]) -> Raw {
    let auth = format!("Bearer {token}");
    let mut headers = vec![("Authorization", auth.as_str()), ("User-Agent", "t")];
    headers.extend_from_slice(extra);
    raw(addr, "GET", target, &headers, b"").await
}

/// POST JSON with the usual GitHub client headers.
pub async fn post(addr: SocketAddr, target: &str, token: &str, body: &serde_json::Value) -> Raw {
    let auth = format!("Bearer {token}");
    raw(
        addr,
        "POST",
        target,
        &[
            ("Authorization", &auth),
            ("User-Agent", "rm-testkit-tests"),
            ("Accept", "application/vnd.github+json"),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
    .await
}

/// DELETE with the usual GitHub client headers.
pub async fn delete(addr: SocketAddr, target: &str, token: &str) -> Raw {
    let auth = format!("Bearer {token}");
    raw(
        addr,
        "DELETE",
        target,
        &[
            ("Authorization", &auth),
            ("User-Agent", "rm-testkit-tests"),
            ("Accept", "application/vnd.github+json"),
        ],
        b"",
    )
    .await
}

/// Polls `f` until it returns true or 5 s pass.
pub async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}
