//! The collectors read at every encoding: the registered fences, the certificate's
//! expiry and the transport's counters (each a family only while it has something to
//! say).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::fence::{FenceStats, FenceStatsSnapshot};
use crate::transport::TransportStatsSnapshot;

/// The registered fences, read at every encoding: `tenure_fence_accepted_total{fence}`
/// and `tenure_fence_rejections_total{fence}` (no family at all without a fence).
#[derive(Debug, Clone, Default)]
pub(super) struct Fences(pub(super) Arc<Mutex<Vec<Fence>>>);

/// A registered fence: its label and its counters.
type Fence = (String, Arc<FenceStats>);

impl Collector for Fences {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let fences: Vec<(String, _)> = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(name, stats)| (name.clone(), stats.snapshot()))
            .collect();
        if fences.is_empty() {
            return Ok(());
        }
        type Read = fn(&FenceStatsSnapshot) -> u64;
        let families: [(&str, &str, Read); 2] = [
            ("fence_accepted", "Writes a fence accepted.", |s| s.accepted),
            (
                "fence_rejections",
                "Writes a fence rejected (stale token).",
                |s| s.rejected_stale,
            ),
        ];
        for (name, help, value) in families {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (fence, s) in &fences {
                let label = [("fence", fence.as_str())];
                ConstCounter::new(value(s)).encode(family.encode_family(&label)?)?;
            }
        }
        Ok(())
    }
}

/// Seconds until this node's certificate expires, computed at every encoding:
/// `tenure_cert_expiry_seconds` (absent until [`Metrics::set_cert_not_after`]).
#[derive(Debug)]
pub(super) struct CertExpiry(pub(super) Arc<AtomicI64>);

impl Collector for CertExpiry {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let not_after = self.0.load(Ordering::Relaxed);
        if not_after == i64::MIN {
            return Ok(());
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let left = not_after.saturating_sub(now);
        let gauge = ConstGauge::new(left);
        let metric = encoder.encode_descriptor(
            "cert_expiry_seconds",
            "Seconds until this node's own TLS certificate expires (negative: expired).",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

/// The transport's counters, read at every encoding: `tenure_transport_*_total`.
pub(super) struct TransportCollector<F>(pub(super) F);

impl<F> std::fmt::Debug for TransportCollector<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransportCollector")
    }
}

impl<F> Collector for TransportCollector<F>
where
    F: Fn() -> Option<TransportStatsSnapshot> + Send + Sync + 'static,
{
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(t) = (self.0)() else {
            return Ok(());
        };
        let rows: [(&str, &str, u64); 15] = [
            ("sent", "Messages handed to a connection.", t.sent),
            ("received", "Messages delivered to the driver.", t.received),
            (
                "dropped_queue_full",
                "Messages dropped: peer queue full.",
                t.dropped_queue_full,
            ),
            (
                "dropped_unknown_peer",
                "Messages dropped: unknown peer.",
                t.dropped_unknown_peer,
            ),
            (
                "dropped_inbound_full",
                "Inbound messages dropped: driver busy.",
                t.dropped_inbound_full,
            ),
            (
                "dropped_inbound_share",
                "Inbound messages dropped: their peer had its share of the driver's channel waiting.",
                t.dropped_inbound_share,
            ),
            (
                "from_mismatch",
                "Messages dropped: sender differs from certificate.",
                t.from_mismatch,
            ),
            (
                "frames_oversized",
                "Frames over the size limit.",
                t.frames_oversized,
            ),
            (
                "frames_malformed",
                "Frames that did not decode.",
                t.frames_malformed,
            ),
            (
                "connections_refused",
                "Incoming connections refused.",
                t.connections_refused,
            ),
            (
                "connect_failures",
                "Outbound connection attempts that failed.",
                t.connect_failures,
            ),
            (
                "frames_too_many_entries",
                "Frames with more entries than the limit.",
                t.frames_too_many_entries,
            ),
            (
                "frames_timed_out",
                "Frames not received within the frame deadline.",
                t.frames_timed_out,
            ),
            (
                "frames_waited_for_budget",
                "Frames that waited for the inbound byte budget.",
                t.frames_waited_for_budget,
            ),
            (
                "connections_over_limit",
                "Incoming connections refused: the peer had too many.",
                t.connections_over_limit,
            ),
        ];
        for (name, help, value) in rows {
            let name = format!("transport_{name}");
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(
                &name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        Ok(())
    }
}
