//! Connection ids: [`RandomCids`], drawn so that packets of a previous life of this node
//! get a stateless reset.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;

#[cfg(doc)]
use super::QuicConfig;

/// Connection ids of 8 random bytes. Any id is accepted as possibly ours, so packets of
/// a previous life of this node get a stateless reset instead of being ignored.
///
/// Drawn from the OS, or from a seeded RNG ([`QuicConfig::rng_seed`]).
pub(super) struct RandomCids(Option<rand::rngs::StdRng>);

impl RandomCids {
    /// A generator for `seed`; `made` counts the generators made for it, so two never
    /// draw the same ids.
    pub(super) fn new(seed: Option<u64>, made: &AtomicU64) -> RandomCids {
        use rand::SeedableRng;
        RandomCids(seed.map(|s| {
            let k = made.fetch_add(1, Ordering::Relaxed);
            rand::rngs::StdRng::seed_from_u64(s ^ 0xc1d5 ^ (k << 32))
        }))
    }
}

impl quinn::ConnectionIdGenerator for RandomCids {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        let bytes: [u8; 8] = match &mut self.0 {
            Some(rng) => rng.gen(),
            None => rand::random(),
        };
        quinn::ConnectionId::new(&bytes)
    }
    fn cid_len(&self) -> usize {
        8
    }
    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// Where a dial's first destination connection id comes from (the keys of its Initial
/// packets derive from it).
pub(super) type InitialDcids = Arc<dyn Fn() -> quinn::ConnectionId + Send + Sync>;

/// First destination ids of 16 bytes drawn from `seed` (quinn draws them from the OS):
/// with the rest of a handshake's randomness seeded, a run's packets are the same bytes
/// each time.
pub(super) fn initial_dcids(seed: u64) -> InitialDcids {
    use rand::SeedableRng;
    let rng = Mutex::new(rand::rngs::StdRng::seed_from_u64(seed ^ 0x1d_c1d5));
    Arc::new(move || {
        let bytes: [u8; 16] = rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .gen();
        quinn::ConnectionId::new(&bytes)
    })
}
