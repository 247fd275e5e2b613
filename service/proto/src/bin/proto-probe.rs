//! `proto-probe <socket> <METHOD> <path> [json-body]`: makes one raw request to the local API
//! as whoever runs it and prints the HTTP status on the first line and the body on the second.
//! Tests run it as another user (`setpriv --reuid=...`) to check peer authorisation.

#[cfg(not(unix))]
fn main() -> std::process::ExitCode {
    eprintln!("proto-probe: Unix sockets only");
    std::process::ExitCode::from(69)
}

#[cfg(unix)]
use http_body_util::{BodyExt, Full};
#[cfg(unix)]
use hyper::body::Bytes;
#[cfg(unix)]
use hyper::{Method, Request};
#[cfg(unix)]
use std::process::ExitCode;

#[cfg(unix)]
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, method, path, rest @ ..] = args.as_slice() else {
        eprintln!("usage: proto-probe <socket> <METHOD> <path> [json-body]");
        return ExitCode::from(64);
    };
    match probe(socket, method, path, rest.first()).await {
        Ok((status, body)) => {
            println!("{status}");
            println!("{body}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("proto-probe: {error}");
            ExitCode::from(2)
        }
    }
}

#[cfg(unix)]
async fn probe(
    socket: &str,
    method: &str,
    path: &str,
    body: Option<&String>,
) -> Result<(u16, String), String> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("connect {socket}: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(connection);
    let method = Method::from_bytes(method.as_bytes()).map_err(|e| format!("method: {e}"))?;
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.cloned().unwrap_or_default())))
        .map_err(|e| format!("request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}
