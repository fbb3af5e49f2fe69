//! [`TestHooks`]: what a test may change of a node (its clocks, its draws, its limits),
//! set through [`Config::hooks_mut`](super::Config::hooks_mut) under the `testing`
//! feature.

/// Test hooks of a node: clock skew and clock faults, seeded election timeouts. Only
/// the `testing` feature lets them be set
/// ([`Config::hooks_mut`](super::Config::hooks_mut)); a node without them runs on the
/// real clocks with raft-rs's own draws.
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "testing"), doc(hidden))]
pub struct TestHooks {
    /// This node's clock runs this many times as fast as real time (1.0), for the
    /// clock-skew tests. Must be in [0.25, 4].
    pub clock_rate: f64,
    /// Clock faults (forward steps, stalls) the simulation injects into this node's
    /// clock. `None` in production.
    pub clock_control: Option<crate::clock::ClockControl>,
    /// Draw raft-rs's randomized election timeouts from an RNG seeded with this (and the
    /// node id) instead of the OS-seeded thread RNG, so that a simulation replays them.
    pub election_seed: Option<u64>,
    /// Every election timeout at its minimum, `election_ticks` (the boundary tests: the
    /// fastest election the timing allows).
    pub election_timeouts_at_minimum: bool,
    /// The most bytes the catalog of named elections may take
    /// ([`MAX_CATALOG_BYTES`](crate::election::MAX_CATALOG_BYTES)). A test sets a smaller
    /// one, the same on every node, to fill the catalog with a few hundred elections.
    pub catalog_limit: u64,
    /// The QUIC transport's frame limit for [`Node::start`](crate::Node::start)
    /// (`QuicConfig::max_frame`); `None`: the default,
    /// [`DEFAULT_MAX_FRAME`](crate::transport::frame::DEFAULT_MAX_FRAME).
    pub max_frame: Option<usize>,
    /// The QUIC transport's channel depth to the driver for
    /// [`Node::start`](crate::Node::start) (`QuicConfig::inbound_depth`); `None`: the
    /// default. A test sets a small one to fill it with a flood of a few hundred.
    pub inbound_depth: Option<usize>,
}

impl Default for TestHooks {
    fn default() -> Self {
        TestHooks {
            clock_rate: 1.0,
            clock_control: None,
            election_seed: None,
            election_timeouts_at_minimum: false,
            catalog_limit: crate::election::MAX_CATALOG_BYTES,
            max_frame: None,
            inbound_depth: None,
        }
    }
}
