//! The HTTP fence ([`tenure::fence::http`]) on a real hyper server and client over
//! loopback: a payout service whose handler writes through a [`SqliteFence`] behind
//! [`FenceLayer`], called by workers that carry their leases' tokens in `tenure-fence`.
//!
//! A stale leader that built its request and paused before sending it gets `409
//! Conflict` naming both tokens, and nothing of it lands; the layer refuses a missing,
//! malformed, repeated, foreign or unsigned header before the handler runs; a forged
//! high token without the key moves nothing.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use proptest::prelude::*;
use tenure::fence::http::{
    highest_in, refusal, FenceKey, FenceLayer, HeaderError, PresentedToken, HEADER,
};
use tenure::fence::rusqlite::Connection;
use tenure::fence::SqliteFence;
use tenure::FencingToken;
use tower_layer::Layer;

const T: fn(u64) -> FencingToken = FencingToken::new;

/// How long a test waits for something that should take milliseconds.
const WAIT: Duration = Duration::from_secs(20);

/// The payout service: a database with the fence "settlement".
struct Payouts {
    conn: Mutex<Connection>,
    fence: SqliteFence,
}

impl Payouts {
    fn new() -> Arc<Payouts> {
        let conn = Connection::open_in_memory().expect("sqlite");
        conn.execute_batch(
            "CREATE TABLE payouts (seq INTEGER PRIMARY KEY, payment TEXT NOT NULL, token INTEGER NOT NULL)",
        )
        .expect("the payouts table");
        let fence = SqliteFence::install(&conn, "settlement").expect("install");
        Arc::new(Payouts {
            conn: Mutex::new(conn),
            fence,
        })
    }

    /// What landed, in commit order: (payment, token).
    fn paid(&self) -> Vec<(String, u64)> {
        let conn = self.conn.lock().unwrap();
        let mut st = conn
            .prepare("SELECT payment, token FROM payouts ORDER BY seq")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }
}

type Body = Full<Bytes>;

/// The handler: `POST` pays the body's payment under the request's token, through the
/// fence, in the fence's transaction; `GET` counts payouts (no token needed).
#[derive(Clone)]
struct Handler(Arc<Payouts>);

impl tower_service::Service<Request<Incoming>> for Handler {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let payouts = self.0.clone();
        Box::pin(async move {
            let presented = request.extensions().get::<PresentedToken>().cloned();
            if request.method() == Method::GET {
                let n = payouts.paid().len();
                let who = presented.map_or("no token".to_string(), |t| t.to_string());
                return Ok(Response::new(Body::from(format!("{n} payouts ({who})\n"))));
            }
            let Some(presented) = presented else {
                let mut r = Response::new(Body::from("a payment needs a token\n"));
                *r.status_mut() = StatusCode::PRECONDITION_REQUIRED;
                return Ok(r);
            };
            let payment = request.into_body().collect().await.map_or_else(
                |_| String::new(),
                |b| String::from_utf8_lossy(&b.to_bytes()).into_owned(),
            );
            let mut conn = payouts.conn.lock().unwrap();
            let token = presented.token();
            let written = payouts.fence.write(&mut conn, token, |tx| {
                tx.execute(
                    "INSERT INTO payouts (payment, token) VALUES (?1, ?2)",
                    (&payment, token.term() as i64),
                )
            });
            Ok(match written {
                Ok(_) => Response::new(Body::from(format!("paid {payment} under {presented}\n"))),
                Err(e) => refusal(&presented, &e),
            })
        })
    }
}

/// Serves `layer` around the payout handler on 127.0.0.1, one hyper connection per
/// client.
async fn serve(layer: FenceLayer, payouts: Arc<Payouts>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let service = layer.layer(Handler(payouts));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A worker's HTTP client: one hyper connection to the service.
struct Worker {
    sender: hyper::client::conn::http1::SendRequest<Body>,
}

impl Worker {
    async fn connect(addr: SocketAddr) -> Worker {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        Worker { sender }
    }

    /// Sends `request`; the answer's status, headers and body as text.
    async fn send(&mut self, request: Request<Body>) -> (StatusCode, http::HeaderMap, String) {
        let response = tokio::time::timeout(WAIT, async {
            self.sender.ready().await.expect("ready");
            self.sender.send_request(request).await.expect("send")
        })
        .await
        .expect("an answer within WAIT");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }
}

/// A payout request carrying `presented` (if any).
fn pay(payment: &str, presented: Option<&PresentedToken>) -> Request<Body> {
    let mut r = Request::post("/pay")
        .header("host", "payouts")
        .body(Body::from(payment.to_owned()))
        .unwrap();
    if let Some(t) = presented {
        t.insert(r.headers_mut());
    }
    r
}

fn token(fence: &str, t: u64) -> PresentedToken {
    PresentedToken::new(fence, T(t)).expect("a valid name")
}

#[tokio::test]
async fn http_stale_leader_that_paused_between_building_and_sending_gets_409_naming_both_tokens() {
    let payouts = Payouts::new();
    let addr = serve(FenceLayer::required(), payouts.clone()).await;
    let mut old = Worker::connect(addr).await;
    let mut new = Worker::connect(addr).await;
    // The old leader pays once while it leads, then builds its next request and pauses.
    let (status, _, _) = old.send(pay("p1", Some(&token("settlement", 41)))).await;
    assert_eq!(status, StatusCode::OK);
    let built = pay("p2-stale", Some(&token("settlement", 41)));
    // Meanwhile the new leader (token 42) pays.
    let (status, _, body) = new.send(pay("p2", Some(&token("settlement", 42)))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The old leader wakes and sends what it built.
    let (status, headers, body) = old.send(built).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body.contains("settlement=41") && body.contains("settlement=42"),
        "the 409 names both tokens: {body}"
    );
    assert_eq!(highest_in(&headers), Some(T(42)));
    assert_eq!(
        payouts.paid(),
        vec![("p1".to_string(), 41), ("p2".to_string(), 42)],
        "nothing of the stale request landed"
    );
    // The same tenure writes again (an equal token is the same leader).
    let (status, _, _) = new.send(pay("p3", Some(&token("settlement", 42)))).await;
    assert_eq!(status, StatusCode::OK);
    eprintln!(
        "the stale leader's request got back: {status_line} {body}",
        status_line = StatusCode::CONFLICT
    );
}

#[tokio::test]
async fn http_layer_refuses_a_missing_malformed_repeated_or_foreign_header_before_the_handler() {
    let payouts = Payouts::new();
    let addr = serve(FenceLayer::required().only(["settlement"]), payouts.clone()).await;
    let mut w = Worker::connect(addr).await;
    let (status, _, body) = w.send(pay("p", None)).await;
    assert_eq!(status, StatusCode::PRECONDITION_REQUIRED, "{body}");
    assert!(body.contains("tenure-fence"), "{body}");
    for (value, needle) in [
        ("settlement=abc", "not a decimal number"),
        ("settlement", "not NAME=TOKEN"),
        ("=42", "invalid"),
        ("settle ment=42", "invalid"),
        ("settlement=99999999999999999999999", "above 2^64"),
        ("settlement=42; sig=zz", "64 lowercase hex"),
        ("settlement=42; nonce=1", "only sig=HEX"),
    ] {
        let mut r = pay("p", None);
        r.headers_mut()
            .insert(HEADER, HeaderValue::from_static(value));
        let (status, _, body) = w.send(r).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{value}: {body}");
        assert!(body.contains(needle), "{value}: {body}");
    }
    let mut r = pay("p", Some(&token("settlement", 5)));
    r.headers_mut()
        .append(HEADER, HeaderValue::from_static("settlement=6"));
    let (status, _, body) = w.send(r).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("2 tenure-fence headers"), "{body}");
    let (status, _, body) = w.send(pay("p", Some(&token("shard-1", 5)))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("not \"shard-1\""), "{body}");
    assert!(
        payouts.paid().is_empty(),
        "no refused request reached the handler"
    );
    assert_eq!(
        payouts
            .fence
            .highest(&payouts.conn.lock().unwrap())
            .unwrap(),
        T(0)
    );
}

#[tokio::test]
async fn http_signed_layer_refuses_unsigned_and_forged_tokens_and_they_move_nothing() {
    let key = FenceKey::new(&[7u8; 32]).expect("key");
    let other = FenceKey::new(&[8u8; 32]).expect("key");
    let payouts = Payouts::new();
    let addr = serve(
        FenceLayer::required().signed_by(key.clone()),
        payouts.clone(),
    )
    .await;
    let mut w = Worker::connect(addr).await;
    // An attacker who can reach the service but holds no key sends a token far above any
    // leader's: unsigned, then signed with a key of its own.
    let forged = token("settlement", 1 << 62);
    let (status, _, body) = w.send(pay("steal", Some(&forged))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("not signed"), "{body}");
    let (status, _, body) = w
        .send(pay("steal", Some(&forged.clone().signed(&other))))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("does not verify"), "{body}");
    // A signature is for its name and token: another token under it does not verify.
    let signed = token("settlement", 42).signed(&key);
    let value = signed.header_value();
    let tampered = value.to_str().unwrap().replacen("=42;", "=43;", 1);
    let mut r = pay("p", None);
    r.headers_mut()
        .insert(HEADER, HeaderValue::try_from(tampered).unwrap());
    let (status, _, _) = w.send(r).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // The leader's signed token is accepted: the forgeries moved nothing.
    let (status, _, body) = w.send(pay("p1", Some(&signed))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(payouts.paid(), vec![("p1".to_string(), 42)]);
}

#[tokio::test]
async fn http_optional_layer_passes_a_request_without_a_token_and_parses_one_with() {
    let payouts = Payouts::new();
    let addr = serve(FenceLayer::optional(), payouts.clone()).await;
    let mut w = Worker::connect(addr).await;
    let get = || {
        Request::get("/payouts")
            .header("host", "payouts")
            .body(Body::default())
            .unwrap()
    };
    let (status, _, body) = w.send(get()).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "0 payouts (no token)\n")
    );
    let (status, _, body) = w.send(pay("p1", Some(&token("settlement", 3)))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut r = get();
    token("settlement", 3).insert(r.headers_mut());
    let (_, _, body) = w.send(r).await;
    assert_eq!(body, "1 payouts (settlement=3)\n");
    let mut r = pay("p", None);
    r.headers_mut()
        .insert(HEADER, HeaderValue::from_static("settlement=x"));
    let (status, _, _) = w.send(r).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a malformed header is refused all the same"
    );
}

#[test]
fn http_header_names_are_checked_and_keys_too_short_are_refused() {
    assert!(matches!(
        PresentedToken::new("", T(1)),
        Err(HeaderError::InvalidName { .. })
    ));
    assert!(matches!(
        PresentedToken::new("a/b", T(1)),
        Err(HeaderError::InvalidName { .. })
    ));
    let e = FenceKey::new(&[0u8; 16]).expect_err("16 bytes is too short");
    assert!(
        e.contains("at least 32 bytes") && e.contains("has 16"),
        "{e}"
    );
    assert_eq!(
        format!("{:?}", FenceKey::new(&[1u8; 32]).unwrap()),
        "FenceKey(..)"
    );
}

proptest! {
    /// Any name and token make a header that parses back to them, signed or not.
    #[test]
    fn http_header_round_trips(name in "[A-Za-z0-9._-]{1,128}", t in any::<u64>(), signed in any::<bool>()) {
        let key = FenceKey::new(&[9u8; 32]).unwrap();
        let mut p = PresentedToken::new(&name, T(t)).unwrap();
        if signed {
            p = p.signed(&key);
        }
        let back = PresentedToken::parse(&p.header_value()).unwrap();
        prop_assert_eq!(&back, &p);
        prop_assert_eq!(back.is_signed(), signed);
    }

    /// Any bytes a header may hold parse to a token or to an error: never a panic.
    #[test]
    fn http_header_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(v) = HeaderValue::from_bytes(&bytes) {
            let _ = PresentedToken::parse(&v);
        }
    }
}
