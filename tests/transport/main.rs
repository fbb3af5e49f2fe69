//! QUIC between peers: framing, names, limits, hostile input, certificates.
//!
//! One test binary per topic (`cargo test --test transport`), one module per file:
//!
//! | module | what it tests |
//! |---|---|
//! | [`quic`] | the QUIC transport |
//! | [`names`] | peers by DNS name |
//! | [`peer_input`] | what a member sends, judged |
//! | [`limits`] | bounds on frames, messages and queues |
//! | [`limits_measure`] | measured memory of the bounds |
//! | [`peers_by_name`] | a group whose peers are names |
//! | [`cert_rotation`] | certificate rotation under a running group |

mod cert_rotation;
mod limits;
mod limits_measure;
mod names;
mod peer_input;
mod peers_by_name;
mod quic;
