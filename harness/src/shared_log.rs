//! A log the test can read: a `Write` that keeps what is written, and an slog logger over
//! it. Included by path by the tests that check what a transport or an endpoint logs.

use std::sync::{Arc, Mutex};

use slog::{o, Drain, Logger};

/// A `Write` that keeps what is written, for reading a component's log in a test.
#[derive(Clone, Default)]
pub struct SharedLog(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for SharedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedLog {
    /// A plain-text logger that writes here.
    pub fn logger(&self) -> Logger {
        let decorator = slog_term::PlainSyncDecorator::new(self.clone());
        Logger::root(slog_term::FullFormat::new(decorator).build().fuse(), o!())
    }

    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_owned()
    }
}
