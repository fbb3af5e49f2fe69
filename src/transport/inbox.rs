//! [`Inbox`]: what a transport delivers to its node, one [`Inbound`] item at a time.
//!
//! A transport hands its node an `Inbox` (see [`QuicTransport::start`] and
//! [`MemNetwork::endpoint`]); [`Node::start_with`] takes it. A transport of your own
//! makes one with [`Inbox::channel`] and delivers through the [`InboxSender`].
//!
//! [`QuicTransport::start`]: super::quic::QuicTransport::start
//! [`MemNetwork::endpoint`]: super::mem::MemNetwork::endpoint
//! [`Node::start_with`]: crate::Node::start_with

use tokio::sync::mpsc;

use super::Inbound;

/// The receiving end of what a transport delivers, one [`Inbound`] item at a time. A
/// transport hands its node an `Inbox` ([`QuicTransport::start`],
/// [`MemNetwork::endpoint`]); [`Node::start_with`] takes it. A transport of your own
/// makes one with [`Inbox::channel`] and delivers through the [`InboxSender`].
///
/// [`QuicTransport::start`]: super::quic::QuicTransport::start
/// [`MemNetwork::endpoint`]: super::mem::MemNetwork::endpoint
/// [`Node::start_with`]: crate::Node::start_with
#[derive(Debug)]
pub struct Inbox {
    /// The urgent lane ([`Inbound::is_urgent`]), served first, if the transport keeps
    /// one.
    urgent: Option<mpsc::Receiver<Inbound>>,
    rx: mpsc::Receiver<Inbound>,
}

/// The delivering end of an [`Inbox`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct InboxSender {
    tx: mpsc::Sender<Inbound>,
}

/// Why [`InboxSender::try_deliver`] could not deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliverError {
    /// The inbox holds as many items as it may: the item was not delivered (count it).
    Full,
    /// The inbox is gone (its node stopped).
    Closed,
}

impl Inbox {
    /// An inbox that holds up to `capacity` items (at least 1), and its sender.
    pub fn channel(capacity: usize) -> (InboxSender, Inbox) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (InboxSender { tx }, Inbox { urgent: None, rx })
    }

    /// The inbox of a channel a transport of this crate feeds itself.
    pub(crate) fn from_receiver(rx: mpsc::Receiver<Inbound>) -> Inbox {
        Inbox { urgent: None, rx }
    }

    /// The inbox of two channels a transport of this crate feeds itself: `urgent`'s
    /// items ([`Inbound::is_urgent`]) are taken before `rx`'s.
    pub(crate) fn with_urgent(
        urgent: mpsc::Receiver<Inbound>,
        rx: mpsc::Receiver<Inbound>,
    ) -> Inbox {
        Inbox {
            urgent: Some(urgent),
            rx,
        }
    }

    /// Waits for the next item, the urgent lane's first; `None` once every sender is
    /// gone.
    pub async fn recv(&mut self) -> Option<Inbound> {
        match self.urgent.as_mut() {
            Some(urgent) => recv_urgent_first(urgent, &mut self.rx).await,
            None => self.rx.recv().await,
        }
    }

    /// The next item if one is there, the urgent lane's first.
    pub fn try_recv(&mut self) -> Option<Inbound> {
        match self.urgent.as_mut() {
            Some(urgent) => try_recv_urgent_first(urgent, &mut self.rx),
            None => self.rx.try_recv().ok(),
        }
    }
}

impl InboxSender {
    /// Delivers `item` at once, or says why not (never waits).
    pub fn try_deliver(&self, item: Inbound) -> Result<(), DeliverError> {
        self.tx.try_send(item).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => DeliverError::Full,
            mpsc::error::TrySendError::Closed(_) => DeliverError::Closed,
        })
    }

    /// Delivers `item`, waiting for room; false if the inbox is gone.
    pub async fn deliver(&self, item: Inbound) -> bool {
        self.tx.send(item).await.is_ok()
    }

    /// Whether the inbox is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// The next item of two channels, `urgent`'s first; `None` once both are closed.
pub(crate) async fn recv_urgent_first<T>(
    urgent: &mut mpsc::Receiver<T>,
    bulk: &mut mpsc::Receiver<T>,
) -> Option<T> {
    tokio::select! {
        biased;
        Some(item) = urgent.recv() => Some(item),
        item = bulk.recv() => item,
    }
}

/// An item that waits in either channel now, `urgent`'s first.
pub(crate) fn try_recv_urgent_first<T>(
    urgent: &mut mpsc::Receiver<T>,
    bulk: &mut mpsc::Receiver<T>,
) -> Option<T> {
    urgent.try_recv().or_else(|_| bulk.try_recv()).ok()
}
