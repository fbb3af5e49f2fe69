//! The root election on real nodes: leases, handovers, membership, fences.
//!
//! One test binary per topic (`cargo test --test election`), one module per file:
//!
//! | module | what it tests |
//! |---|---|
//! | [`root`] | leader election, failover and lease overlap |
//! | [`handover`] | leadership transfers |
//! | [`history`] | the replicated tenure history |
//! | [`membership`] | membership changes |
//! | [`founding`] | founding and joining a group |
//! | [`fence`] | fenced resources |
//! | [`fence_pg`] | the PostgreSQL fence, against a real server (`TENURE_PG_URL`) |
//! | [`fence_http`] | the HTTP fence's layer, on a real hyper server and client over loopback |
//! | [`outbox`] | the transactional outbox under a fence, and its example |
//! | [`lease_bound`] | the lease bound at its boundary |

mod fence;
mod fence_http;
mod fence_pg;
mod founding;
mod handover;
mod history;
mod lease_bound;
mod membership;
mod outbox;
mod root;
