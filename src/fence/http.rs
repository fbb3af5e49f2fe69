//! Fencing an HTTP service (the `http-fence` feature): the `tenure-fence` header, which
//! carries a fence's name and a leader's token, a client-side helper that adds it, and a
//! [`tower`](https://docs.rs/tower) layer that hands the handler the token it carried.
//!
//! # The header
//!
//! ```text
//! tenure-fence: settlement=4398046511108
//! tenure-fence: settlement=4398046511108; sig=9f2c…(64 hex digits)
//! ```
//!
//! `NAME=TOKEN`: the fence's name (1 to 128 bytes of `[A-Za-z0-9._-]`, an election's
//! name for a named election's fence) and the token in decimal. With a key
//! ([`FenceKey`]), `; sig=` follows: HMAC-SHA256 over `tenure-fence v1\nNAME\nTOKEN`, in
//! lowercase hex. A service refuses a lower token than it accepted with `409 Conflict`,
//! a body that names both tokens, and the highest in `tenure-fence-highest`.
//!
//! # The check belongs to the handler's write
//!
//! The layer parses the header and checks its signature, and nothing more: it does not
//! compare the token with anything. A layer that checked and advanced a token by itself
//! would be the check-then-write that the [module's docs](super) show to be unsafe (a
//! stale request passes the layer, pauses, and writes after a newer one). The handler
//! takes the [`PresentedToken`] from the request's extensions and makes its write
//! through a fence, in its own transaction ([`SqliteFence`](super::SqliteFence),
//! `PgFence`, [`RocksFence`](super::RocksFence)), and turns a refusal into a response
//! with [`refusal`].
//!
//! # Who may send a token
//!
//! Anyone who can reach the service can send a token, and a token far above any
//! leader's would advance the fence past every token the group will issue for a long
//! time: every leader locked out, and no error but 409s. So the service must know who
//! sends it. Either:
//!
//! - **mutual TLS**: the service accepts only clients with a certificate from the
//!   cluster's CA (rustls's `WebPkiClientVerifier` with the CA tenure's nodes use), and
//!   the workers present theirs; or
//! - **a signed header**: the workers and the service share a secret key
//!   ([`FenceKey`], 32 bytes or more), the workers sign ([`PresentedToken::signed`]) and
//!   the layer refuses a header without a valid signature with `401 Unauthorized`
//!   ([`FenceLayer::signed_by`]). The signature covers the name and the token: replaying
//!   a captured header sends a token some leader really held, which the fence orders
//!   like any other.
//!
//! Either way, whoever holds the key (or a node's certificate) can send any token: keep
//! it where the workers' certificates are kept.
//!
//! # Example
//!
//! ```
//! use tenure::fence::http::{refusal, FenceLayer, PresentedToken};
//! use tenure::FencingToken;
//!
//! // The worker, around its request (reqwest: `.header(name, value)`; hyper: the
//! // request builder's `headers_mut()`):
//! let token = FencingToken::new(42);
//! let presented = PresentedToken::new("settlement", token)?;
//! let mut request = http::Request::post("http://payouts.internal/pay").body(())?;
//! presented.insert(request.headers_mut());
//! assert_eq!(request.headers()["tenure-fence"], "settlement=42");
//!
//! // The service: `FenceLayer::required()` around the handler (tower's `ServiceBuilder`,
//! // axum's `Router::layer`, tonic's `Server::layer`). In the handler:
//! let presented = PresentedToken::from_headers(request.headers())?.expect("a token");
//! let conn = &mut rusqlite::Connection::open_in_memory()?;
//! conn.execute_batch("CREATE TABLE payouts (id INTEGER PRIMARY KEY, token INTEGER)")?;
//! let fence = tenure::fence::SqliteFence::install(conn, presented.fence())?;
//! let response: http::Response<String> = match fence.write(conn, presented.token(), |tx| {
//!     tx.execute("INSERT INTO payouts (token) VALUES (?1)", [presented.token().term() as i64])
//! }) {
//!     Ok(_) => http::Response::new("paid\n".into()),
//!     Err(e) => refusal(&presented, &e),
//! };
//! assert_eq!(response.status(), 200);
//! # let _ = FenceLayer::required();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt::{self, Write as _};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use ring::hmac;

use super::FenceError;
use crate::FencingToken;

/// The header that carries a fence's name and a token: `tenure-fence: NAME=TOKEN`.
pub const HEADER: HeaderName = HeaderName::from_static("tenure-fence");

/// The header of a `409 Conflict` from [`refusal`]: the highest token the service's
/// fence accepted, in decimal.
pub const HIGHEST_HEADER: HeaderName = HeaderName::from_static("tenure-fence-highest");

/// What the signature covers starts with this, so that a key shared with something else
/// cannot be turned into a fence signature.
const SIGNED_PREFIX: &str = "tenure-fence v1\n";

/// The shortest key [`FenceKey::new`] takes, in bytes (HMAC-SHA256's output length).
pub const MIN_KEY_LEN: usize = 32;

/// What is wrong with a `tenure-fence` header (or with a name and token for one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The header is not `NAME=TOKEN` or `NAME=TOKEN; sig=HEX`.
    #[error("the tenure-fence header {value:?} is malformed: {why}")]
    Malformed {
        /// The header's value (at most 200 characters of it).
        value: String,
        /// What is wrong.
        why: String,
    },
    /// The request carries more than one `tenure-fence` header.
    #[error("the request carries {count} tenure-fence headers; send one")]
    Repeated {
        /// How many.
        count: usize,
    },
    /// The fence's name is not 1 to 128 bytes of `[A-Za-z0-9._-]`.
    #[error("the fence name {name:?} is invalid: {why}")]
    InvalidName {
        /// The name (at most 140 characters of it).
        name: String,
        /// What is wrong.
        why: String,
    },
}

/// A fence's name and a token, as a request carries them in `tenure-fence`.
///
/// The layer puts one into the request's extensions; a client builds one from its
/// lease's token and [`insert`](Self::insert)s it into its request's headers.
#[derive(Clone, PartialEq, Eq)]
pub struct PresentedToken {
    fence: String,
    token: FencingToken,
    sig: Option<String>,
}

impl fmt::Debug for PresentedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PresentedToken")
            .field("fence", &self.fence)
            .field("token", &self.token.term())
            .field("signed", &self.sig.is_some())
            .finish()
    }
}

impl fmt::Display for PresentedToken {
    /// `NAME=TOKEN`, without the signature.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.fence, self.token.term())
    }
}

impl PresentedToken {
    /// `token` for the fence `fence` (the election's name for a named election's fence).
    ///
    /// # Errors
    /// [`HeaderError::InvalidName`] unless `fence` is 1 to 128 bytes of `[A-Za-z0-9._-]`.
    pub fn new(fence: &str, token: FencingToken) -> Result<PresentedToken, HeaderError> {
        crate::election::check_name(fence).map_err(|e| match e {
            crate::election::ElectionError::InvalidName { name, why } => {
                HeaderError::InvalidName { name, why }
            }
            other => HeaderError::InvalidName {
                name: fence.chars().take(140).collect(),
                why: other.to_string(),
            },
        })?;
        Ok(PresentedToken {
            fence: fence.to_owned(),
            token,
            sig: None,
        })
    }

    /// The same, signed with `key` (a service whose layer is
    /// [`signed_by`](FenceLayer::signed_by) that key accepts it).
    #[must_use]
    pub fn signed(mut self, key: &FenceKey) -> PresentedToken {
        self.sig = Some(hex(
            hmac::sign(&key.0, self.signed_bytes().as_bytes()).as_ref()
        ));
        self
    }

    /// The fence's name.
    pub fn fence(&self) -> &str {
        &self.fence
    }

    /// The token.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Whether the header carried a signature (the layer checked it if it has a key).
    pub fn is_signed(&self) -> bool {
        self.sig.is_some()
    }

    /// The header's value: `NAME=TOKEN`, and `; sig=HEX` if signed.
    pub fn header_value(&self) -> HeaderValue {
        let mut v = self.to_string();
        if let Some(sig) = &self.sig {
            let _ = write!(v, "; sig={sig}");
        }
        // Only [A-Za-z0-9._-], digits, '=', ';', ' ' and hex: always a valid value.
        HeaderValue::try_from(v).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// Sets `tenure-fence` in `headers` (replacing one already there).
    pub fn insert(&self, headers: &mut HeaderMap) {
        headers.insert(HEADER, self.header_value());
    }

    /// Parses one header value.
    ///
    /// # Errors
    /// [`HeaderError::Malformed`] or [`HeaderError::InvalidName`], naming the problem.
    pub fn parse(value: &HeaderValue) -> Result<PresentedToken, HeaderError> {
        let shown = || {
            String::from_utf8_lossy(value.as_bytes())
                .chars()
                .take(200)
                .collect::<String>()
        };
        let malformed = |why: &str| HeaderError::Malformed {
            value: shown(),
            why: why.to_owned(),
        };
        let text = value.to_str().map_err(|_| malformed("not visible ASCII"))?;
        let (pair, sig) = match text.split_once(';') {
            None => (text, None),
            Some((pair, rest)) => {
                let sig = rest
                    .trim()
                    .strip_prefix("sig=")
                    .ok_or_else(|| malformed("after ';' only sig=HEX may follow"))?;
                if sig.len() != 64 || !sig.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                    return Err(malformed("sig is not 64 lowercase hex digits"));
                }
                (pair, Some(sig.to_owned()))
            }
        };
        let (name, token) = pair
            .trim()
            .rsplit_once('=')
            .ok_or_else(|| malformed("not NAME=TOKEN"))?;
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
            return Err(malformed("the token is not a decimal number"));
        }
        let token: u64 = token
            .parse()
            .map_err(|_| malformed("the token is above 2^64 - 1"))?;
        let mut t = PresentedToken::new(name, FencingToken::new(token))?;
        t.sig = sig;
        Ok(t)
    }

    /// The token a request's headers carry: `None` without a `tenure-fence` header.
    ///
    /// # Errors
    /// [`HeaderError::Repeated`] for more than one, or what [`parse`](Self::parse) says.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<PresentedToken>, HeaderError> {
        let mut all = headers.get_all(HEADER).iter();
        let Some(first) = all.next() else {
            return Ok(None);
        };
        let more = all.count();
        if more > 0 {
            return Err(HeaderError::Repeated { count: more + 1 });
        }
        PresentedToken::parse(first).map(Some)
    }

    /// Whether the signature is `key`'s for this name and token (constant time).
    fn verify(&self, key: &FenceKey) -> bool {
        let Some(sig) = &self.sig else { return false };
        let Some(bytes) = unhex(sig) else {
            return false;
        };
        hmac::verify(&key.0, self.signed_bytes().as_bytes(), &bytes).is_ok()
    }

    fn signed_bytes(&self) -> String {
        format!("{SIGNED_PREFIX}{}\n{}", self.fence, self.token.term())
    }
}

/// The highest token a `409 Conflict` from [`refusal`] names (`tenure-fence-highest`),
/// for a client that wants to log it or step down.
pub fn highest_in(headers: &HeaderMap) -> Option<FencingToken> {
    let v = headers.get(HIGHEST_HEADER)?.to_str().ok()?;
    v.trim().parse().ok().map(FencingToken::new)
}

/// A secret key the workers sign their tokens with and the service checks them with
/// (HMAC-SHA256). Its `Debug` shows no key material.
#[derive(Clone)]
pub struct FenceKey(hmac::Key);

impl fmt::Debug for FenceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FenceKey(..)")
    }
}

impl FenceKey {
    /// A key from secret bytes: at least [`MIN_KEY_LEN`] of them, from a CSPRNG
    /// (`head -c 32 /dev/urandom > fence.key`).
    ///
    /// # Errors
    /// A message naming the length when the key is shorter.
    pub fn new(secret: &[u8]) -> Result<FenceKey, String> {
        if secret.len() < MIN_KEY_LEN {
            return Err(format!(
                "a fence key needs at least {MIN_KEY_LEN} bytes, this one has {}",
                secret.len()
            ));
        }
        Ok(FenceKey(hmac::Key::new(hmac::HMAC_SHA256, secret)))
    }

    /// A key from a file's bytes (all of them; at least [`MIN_KEY_LEN`]).
    ///
    /// # Errors
    /// A message naming the file when it cannot be read or is too short.
    pub fn from_file(path: &std::path::Path) -> Result<FenceKey, String> {
        let bytes =
            std::fs::read(path).map_err(|e| format!("the fence key {}: {e}", path.display()))?;
        FenceKey::new(&bytes).map_err(|e| format!("the fence key {}: {e}", path.display()))
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The response for a fence's refusal of a request's token, with the body the issue
/// needs to be found: `409 Conflict` for a stale token (the body names both tokens, and
/// `tenure-fence-highest` carries the highest), `503 Service Unavailable` for a
/// [conflict](FenceError::is_conflict) (retry with the same token), `400 Bad Request`
/// for a token out of range, `500 Internal Server Error` for anything else.
pub fn refusal<B: From<String>>(presented: &PresentedToken, err: &FenceError) -> Response<B> {
    let fence = presented.fence();
    let (status, body, highest) = match err {
        FenceError::Stale {
            presented: p,
            highest,
        } => (
            StatusCode::CONFLICT,
            format!(
                "stale fencing token: {fence}={} is below {fence}={}, the highest this \
                 service accepted\n",
                p.term(),
                highest.term()
            ),
            Some(*highest),
        ),
        e if e.is_conflict() => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{e}; retry with the same token\n"),
            None,
        ),
        e @ FenceError::TokenOutOfRange { .. } => (StatusCode::BAD_REQUEST, format!("{e}\n"), None),
        e => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the fence failed: {e}\n"),
            None,
        ),
    };
    let mut response = Response::new(B::from(body));
    *response.status_mut() = status;
    if let Some(h) = highest {
        if let Ok(v) = HeaderValue::try_from(h.term().to_string()) {
            response.headers_mut().insert(HIGHEST_HEADER, v);
        }
    }
    response
}

/// What [`FenceLayer`] does; shared by its services.
#[derive(Debug, Clone, Default)]
struct Policy {
    /// Refuse a request without the header (`428 Precondition Required`).
    required: bool,
    /// Refuse a header without this key's valid signature (`401 Unauthorized`).
    key: Option<FenceKey>,
    /// The fences this service keeps; a header naming another is refused
    /// (`400 Bad Request`). Empty: any.
    fences: Vec<String>,
}

/// A tower layer that parses `tenure-fence` and puts the [`PresentedToken`] into the
/// request's extensions for the handler, which writes through its fence and answers a
/// refusal with [`refusal`]. It compares no token with anything (the module's docs say
/// why). It refuses, before the handler runs:
///
/// | request | answer |
/// |---|---|
/// | no header, when [`required`](Self::required) | `428 Precondition Required` |
/// | a malformed header, or more than one | `400 Bad Request`, naming the problem |
/// | a fence this service does not keep ([`only`](Self::only)) | `400 Bad Request` |
/// | no valid signature, when [`signed_by`](Self::signed_by) a key | `401 Unauthorized` |
///
/// The body of each says what was wrong, in one line of text. The response body type
/// needs `From<String>` (hyper's `Full<Bytes>`, axum's `Body` and `String` have it).
#[derive(Debug, Clone)]
pub struct FenceLayer {
    policy: Arc<Policy>,
}

impl FenceLayer {
    /// Every request must carry a token: one without gets `428 Precondition Required`.
    pub fn required() -> FenceLayer {
        FenceLayer {
            policy: Arc::new(Policy {
                required: true,
                ..Policy::default()
            }),
        }
    }

    /// A request without a token passes, with no [`PresentedToken`] in its extensions
    /// (reads, say); one with a token is parsed and checked as with
    /// [`required`](Self::required).
    pub fn optional() -> FenceLayer {
        FenceLayer {
            policy: Arc::new(Policy::default()),
        }
    }

    /// Accepts only tokens signed with `key` ([`PresentedToken::signed`]).
    #[must_use]
    pub fn signed_by(mut self, key: FenceKey) -> FenceLayer {
        Arc::make_mut(&mut self.policy).key = Some(key);
        self
    }

    /// Accepts only tokens for these fences.
    #[must_use]
    pub fn only<I: IntoIterator<Item = S>, S: Into<String>>(mut self, fences: I) -> FenceLayer {
        Arc::make_mut(&mut self.policy).fences = fences.into_iter().map(Into::into).collect();
        self
    }
}

impl<S> tower_layer::Layer<S> for FenceLayer {
    type Service = FenceService<S>;

    fn layer(&self, inner: S) -> FenceService<S> {
        FenceService {
            inner,
            policy: self.policy.clone(),
        }
    }
}

/// The service [`FenceLayer`] wraps around a handler.
#[derive(Debug, Clone)]
pub struct FenceService<S> {
    inner: S,
    policy: Arc<Policy>,
}

impl Policy {
    /// The token `headers` carry, or the refusal to send instead.
    fn admit(&self, headers: &HeaderMap) -> Result<Option<PresentedToken>, (StatusCode, String)> {
        let presented = PresentedToken::from_headers(headers)
            .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
        let Some(t) = presented else {
            if self.required {
                return Err((
                    StatusCode::PRECONDITION_REQUIRED,
                    "this service is fenced: send the leader's token in a tenure-fence \
                     header (NAME=TOKEN)"
                        .to_owned(),
                ));
            }
            return Ok(None);
        };
        if !self.fences.is_empty() && !self.fences.contains(&t.fence) {
            return Err((
                StatusCode::BAD_REQUEST,
                format!(
                    "this service keeps the fences {}, not {:?}",
                    self.fences.join(", "),
                    t.fence
                ),
            ));
        }
        if let Some(key) = &self.key {
            if !t.verify(key) {
                return Err((
                    StatusCode::UNAUTHORIZED,
                    if t.sig.is_some() {
                        format!("the tenure-fence header's signature for {t} does not verify")
                    } else {
                        format!("the tenure-fence header for {t} is not signed; this service needs a signature")
                    },
                ));
            }
        }
        Ok(Some(t))
    }
}

impl<S, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for FenceService<S>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: From<String>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        match self.policy.admit(request.headers()) {
            Ok(token) => {
                if let Some(t) = token {
                    request.extensions_mut().insert(t);
                }
                ResponseFuture::Inner {
                    inner: self.inner.call(request),
                }
            }
            Err((status, why)) => {
                let mut response = Response::new(ResBody::from(format!("{why}\n")));
                *response.status_mut() = status;
                ResponseFuture::Refused {
                    response: Some(response),
                }
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`FenceService`]: the handler's, or a refusal ready at once.
    #[project = ResponseFutureProj]
    #[allow(missing_docs)] // the macro takes no docs on fields: `inner` is the handler's
                           // future, `response` the refusal.
    pub enum ResponseFuture<F, B> {
        /// The handler runs.
        Inner { #[pin] inner: F },
        /// Refused before the handler.
        Refused { response: Option<Response<B>> },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ResponseFutureProj::Inner { inner } => inner.poll(cx),
            ResponseFutureProj::Refused { response } => Poll::Ready(Ok(response
                .take()
                .expect("a FenceService future polled after it completed"))),
        }
    }
}
