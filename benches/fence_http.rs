//! What the HTTP fence's layer (`tenure::fence::http::FenceLayer`) costs a request.
//!
//! ```text
//! cargo bench --bench fence_http               # 200 000 calls in process, 20 000 over loopback
//! cargo bench --bench fence_http -- --quick    # 20 000 and 2 000 (CI)
//! ```
//!
//! **In process:** a handler that answers at once, called through `tower_service::Service`
//! bare, behind `FenceLayer::required()` with a `tenure-fence` header, and behind
//! `FenceLayer::required().signed_by(key)` with a signed one. Each call is timed alone,
//! from `call` to the ready response (the clock's own cost, some tens of nanoseconds, is
//! in every row alike). **Over loopback:** the same handler on a hyper server, one hyper
//! client sending requests one after another, bare and behind the signed layer: the
//! layer's cost beside a request's.
//!
//! Per setup: p50, p99 and max per request. Results:
//! `<target dir>/tenure-bench/fence_http.txt`.
mod support;

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use support::{summarize, table};
use tenure::fence::http::{FenceKey, FenceLayer, PresentedToken};
use tenure::FencingToken;
use tower_layer::Layer;
use tower_service::Service;

const USAGE: &str = "\
usage: cargo bench --bench fence_http -- [--quick]

  --quick  20 000 calls in process and 2 000 over loopback per setup (CI)";

/// A handler that answers at once: what is left is the layer's cost.
#[derive(Clone)]
struct Ok200;

impl<B> Service<Request<B>> for Ok200 {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Full<Bytes>>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let token = request
            .extensions()
            .get::<PresentedToken>()
            .map_or(0, |t| t.token().term());
        std::future::ready(Ok(Response::new(Full::from(token.to_string()))))
    }
}

fn request(presented: Option<&PresentedToken>) -> Request<Full<Bytes>> {
    let mut r = Request::post("/pay").body(Full::default()).unwrap();
    if let Some(t) = presented {
        t.insert(r.headers_mut());
    }
    r
}

/// Times `n` calls of `svc`, each alone; nanoseconds per call.
fn in_process<S>(mut svc: S, presented: Option<&PresentedToken>, n: usize) -> Vec<f64>
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>,
{
    let requests: Vec<_> = (0..n).map(|_| request(presented)).collect();
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::with_capacity(n);
    for r in requests {
        let t = Instant::now();
        let fut = pin!(svc.call(r));
        let Poll::Ready(Ok(response)) = fut.poll(&mut cx) else {
            panic!("the handler answers at once");
        };
        out.push(t.elapsed().as_nanos() as f64);
        assert_eq!(response.status(), 200);
    }
    out
}

/// Serves `svc` on 127.0.0.1 and times `n` requests from one hyper client, one after
/// another; microseconds per request.
async fn over_loopback<S>(svc: S, presented: Option<&PresentedToken>, n: usize) -> Vec<f64>
where
    S: Service<
            Request<hyper::body::Incoming>,
            Response = Response<Full<Bytes>>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let svc = TowerToHyperService::new(svc.clone());
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc),
            );
        }
    });
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut out = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let r = request(presented);
        let t = Instant::now();
        sender.ready().await.unwrap();
        let response = sender.send_request(r).await.unwrap();
        let body = response.into_body().collect().await.unwrap();
        if i >= n / 10 {
            // The first tenth warms the connection up.
            out.push(t.elapsed().as_nanos() as f64 / 1e3);
        }
        drop(body);
    }
    out
}

fn main() {
    let mut quick = false;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--quick" => quick = true,
            "--bench" => {}
            other => {
                eprintln!("unknown argument {other:?}\n{USAGE}");
                std::process::exit(2);
            }
        }
    }
    let (n, m) = if quick {
        (20_000, 2_000)
    } else {
        (200_000, 20_000)
    };
    let key = FenceKey::new(&[7u8; 32]).unwrap();
    let plain = PresentedToken::new("settlement", FencingToken::new(4_398_046_511_108)).unwrap();
    let signed = plain.clone().signed(&key);
    let required = FenceLayer::required();
    let with_key = FenceLayer::required().signed_by(key);
    let row = |what: &str, unit: &str, v: &[f64]| {
        let s = summarize(v);
        vec![
            what.to_string(),
            s.n.to_string(),
            format!("{:.0} {unit}", s.p50),
            format!("{:.0} {unit}", s.p99),
            format!("{:.0} {unit}", s.max),
        ]
    };
    let mut rows = vec![
        row(
            "in process: bare handler",
            "ns",
            &in_process(Ok200, None, n),
        ),
        row(
            "in process: FenceLayer::required()",
            "ns",
            &in_process(required.layer(Ok200), Some(&plain), n),
        ),
        row(
            "in process: ...signed_by(key), signed header",
            "ns",
            &in_process(with_key.layer(Ok200), Some(&signed), n),
        ),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rows.push(row(
        "loopback: bare handler",
        "us",
        &rt.block_on(over_loopback(Ok200, None, m)),
    ));
    rows.push(row(
        "loopback: ...signed_by(key), signed header",
        "us",
        &rt.block_on(over_loopback(with_key.layer(Ok200), Some(&signed), m)),
    ));
    let text = format!(
        "the HTTP fence's layer: each request timed alone (in process: call to ready \
         response; loopback: one hyper client, request to whole response)\n{}",
        table(&["setup", "requests", "p50", "p99", "max"], &rows)
    );
    print!("{text}");
    let path = support::save("fence_http.txt", &text);
    println!("saved {}", path.display());
}
