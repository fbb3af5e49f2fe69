//! tenure's logs as `tracing` events (cargo feature `tracing`).
//!
//! tenure logs through [`slog`], because raft-rs does: the logger given to
//! [`ConfigBuilder::logger`] receives tenure's own records and raft-rs's.
//! [`TracingDrain`] is a slog drain that hands each record to the current `tracing`
//! dispatcher as an event, so a host that logs with `tracing` sees tenure's records in
//! its subscriber, filtered and formatted like its own:
//!
//! | slog | `tracing` event |
//! |---|---|
//! | level `Critical` and `Error` / `Warning` / `Info` / `Debug` / `Trace` | `ERROR` / `WARN` / `INFO` / `DEBUG` / `TRACE` |
//! | the message | the `message` field |
//! | each key-value pair, the record's and its loggers' (`node`, `raft_id`, `component`, ...) | a field of that name, recorded as a number, bool or string (a key `message` becomes `slog.message`) |
//! | the module the record was logged in (`raft::raft`, `tenure::driver`) | the target, so a `raft=warn` filter quiets raft-rs |
//! | the file and line | the file and line |
//!
//! A key given twice keeps its first value: the record's wins over its logger's, and a
//! logger's over its parent's. Records are dispatched on the thread that logs them,
//! inside the spans current there.
//!
//! # Caveats
//!
//! - A subscriber that writes synchronously to a slow sink slows the node's driver, which
//!   logs from its own task: give it a non-blocking writer (`tracing-appender`'s
//!   `non_blocking`), as [`terminal_logger`] puts `slog-async` in front of the terminal.
//! - `tracing` learns an event's field names when its call site is registered; slog's
//!   keys are known only when a record arrives. So the drain registers a call site for
//!   each logging statement and set of keys the first time it sees them, and keeps it
//!   for the life of the process (a few hundred for tenure and raft-rs). Past
//!   [`MAX_CALLSITES`] of them or [`MAX_KEYS`] distinct key names, or with more than
//!   [`MAX_FIELDS`] pairs in one record, the pairs arrive together as one string field,
//!   `slog.kv` (`a=1, b=x`), with target `slog` and the module in `slog.module`.
//!
//! [`ConfigBuilder::logger`]: crate::config::ConfigBuilder::logger
//! [`terminal_logger`]: crate::terminal_logger

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::sync::{OnceLock, RwLock};

use slog::{Drain, Key, Logger, OwnedKVList, Record, KV};
use tracing_core::callsite::{self, Callsite, Identifier};
use tracing_core::field::{Field, FieldSet, Value};
use tracing_core::metadata::{Kind, Level, LevelFilter};
use tracing_core::{dispatcher, subscriber::Interest, Event, Metadata};

/// The most key-value pairs of one record that become fields of their own.
pub const MAX_FIELDS: usize = 31;

/// The most call sites the drain registers.
pub const MAX_CALLSITES: usize = 4096;

/// The most distinct key names the drain keeps.
pub const MAX_KEYS: usize = 4096;

/// A [`slog::Drain`] that forwards every record to `tracing` as an event (see the
/// [module documentation](self)).
///
/// ```
/// let logger = slog::Logger::root(tenure::logging::TracingDrain, slog::o!());
/// // The same: let logger = tenure::logging::tracing_logger();
/// slog::info!(logger, "lease acquired"; "token" => 7);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingDrain;

/// A slog logger that forwards to `tracing` through [`TracingDrain`], for
/// [`ConfigBuilder::logger`](crate::config::ConfigBuilder::logger).
pub fn tracing_logger() -> Logger {
    Logger::root(TracingDrain, slog::o!())
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        let level = level_of(record.level());
        // The most verbose level any subscriber wants: most debug and trace records stop
        // here, before their pairs are read.
        if level > LevelFilter::current() {
            return Ok(());
        }
        let mut pairs = Pairs::default();
        // slog hands a record's pairs over last to first: put them as written.
        let _ = record.kv().serialize(record, &mut pairs);
        pairs.list.reverse();
        let _ = values.serialize(record, &mut pairs);
        pairs.dedup();

        let msg = record.msg();
        let named = pairs
            .names()
            .and_then(|names| Site::named(level, record, names));
        match named {
            Some(site) => {
                let mut vals: Vec<Option<&dyn Value>> = Vec::with_capacity(pairs.list.len() + 1);
                vals.push(Some(msg));
                vals.extend(pairs.list.iter().map(|(_, v)| v.as_value()));
                site.emit(&vals);
            }
            None => {
                let joined = pairs.joined();
                let module = record.module();
                Site::overflow(level).emit(&[Some(msg), Some(&module), Some(&joined)]);
            }
        }
        Ok(())
    }
}

fn level_of(level: slog::Level) -> Level {
    match level {
        slog::Level::Critical | slog::Level::Error => Level::ERROR,
        slog::Level::Warning => Level::WARN,
        slog::Level::Info => Level::INFO,
        slog::Level::Debug => Level::DEBUG,
        slog::Level::Trace => Level::TRACE,
    }
}

fn level_index(level: Level) -> usize {
    match level {
        Level::ERROR => 0,
        Level::WARN => 1,
        Level::INFO => 2,
        Level::DEBUG => 3,
        _ => 4,
    }
}

/// A call site the drain registered: one logging statement with one set of keys (or
/// the overflow site of a level).
struct Site {
    meta: OnceLock<Metadata<'static>>,
    /// The fields of `meta`, in order: the message, then the keys.
    fields: OnceLock<Vec<Field>>,
}

/// What identifies a [`Site`]: the statement's level, module, file and line, and the
/// keys its record carried (its loggers' included).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct SiteKey {
    level: usize,
    module: &'static str,
    file: &'static str,
    line: u32,
    names: Vec<&'static str>,
}

static SITES: RwLock<BTreeMap<SiteKey, &'static Site>> = RwLock::new(BTreeMap::new());

impl Callsite for Site {
    fn set_interest(&self, _: Interest) {
        // Not cached: `emit` asks the dispatcher each time (after the level check).
    }

    fn metadata(&self) -> &Metadata<'_> {
        self.meta
            .get()
            .expect("a site's metadata is set before it is registered")
    }
}

impl Site {
    /// A new site, registered with `tracing` when `register`; it lives as long as the
    /// process.
    fn leak(
        name: &'static str,
        target: &'static str,
        level: Level,
        place: Option<(&'static str, u32, &'static str)>,
        names: &'static [&'static str],
        register: bool,
    ) -> &'static Site {
        let site: &'static Site = Box::leak(Box::new(Site {
            meta: OnceLock::new(),
            fields: OnceLock::new(),
        }));
        let fields = FieldSet::new(names, Identifier(site));
        let meta = Metadata::new(
            name,
            target,
            level,
            place.map(|p| p.0),
            place.map(|p| p.1),
            place.map(|p| p.2),
            fields,
            Kind::EVENT,
        );
        let meta = site.meta.get_or_init(|| meta);
        site.fields.get_or_init(|| meta.fields().iter().collect());
        if register {
            callsite::register(site);
        }
        site
    }

    /// The site of `record`'s statement with these keys; `None` once there are
    /// [`MAX_CALLSITES`].
    fn named(level: Level, record: &Record<'_>, names: Vec<&'static str>) -> Option<&'static Site> {
        let key = SiteKey {
            level: level_index(level),
            module: record.module(),
            file: record.file(),
            line: record.line(),
            names,
        };
        if let Some(site) = SITES
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
        {
            return Some(site);
        }
        let mut sites = SITES
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(site) = sites.get(&key) {
            return Some(site);
        }
        if sites.len() >= MAX_CALLSITES {
            return None;
        }
        let mut names = Vec::with_capacity(key.names.len() + 1);
        names.push("message");
        names.extend(&key.names);
        let name: &'static str = Box::leak(format!("event {}:{}", key.file, key.line).into());
        let site = Site::leak(
            name,
            key.module,
            level,
            Some((key.file, key.line, key.module)),
            Box::leak(names.into_boxed_slice()),
            true,
        );
        sites.insert(key, site);
        Some(site)
    }

    /// The site of `level` for records whose pairs arrive as one string.
    fn overflow(level: Level) -> &'static Site {
        static OVERFLOW: [OnceLock<&'static Site>; 5] = [const { OnceLock::new() }; 5];
        OVERFLOW[level_index(level)].get_or_init(|| {
            Site::leak(
                "slog event",
                "slog",
                level,
                None,
                &["message", "slog.module", "slog.kv"],
                true,
            )
        })
    }

    /// Dispatches an event of this site with one value per field (`None`: left out).
    fn emit(&'static self, values: &[Option<&dyn Value>]) {
        let meta = self.metadata();
        let fields = self.fields.get().expect("set with the metadata");
        debug_assert_eq!(values.len(), fields.len());
        dispatcher::get_default(|dispatch| {
            if !dispatch.enabled(meta) {
                return;
            }
            // `tracing` takes the values as an array; the slots past this site's fields
            // hold a field of another site, which every visitor skips.
            let mut set: [(&Field, Option<&dyn Value>); MAX_FIELDS + 1] =
                [(padding(), None); MAX_FIELDS + 1];
            for (slot, (field, value)) in set.iter_mut().zip(fields.iter().zip(values)) {
                *slot = (field, *value);
            }
            dispatch.event(&Event::new(meta, &meta.fields().value_set(&set)));
        });
    }
}

/// A field of a site of its own (never registered, never dispatched), to fill the
/// unused slots of an event's values.
fn padding() -> &'static Field {
    static PADDING: OnceLock<&'static Site> = OnceLock::new();
    let site = PADDING
        .get_or_init(|| Site::leak("padding", "slog", Level::TRACE, None, &["padding"], false));
    &site.fields.get().expect("set with the metadata")[0]
}

/// `name` as a `&'static str`, kept once; `None` once there are [`MAX_KEYS`].
fn intern(name: &str) -> Option<&'static str> {
    static NAMES: RwLock<BTreeSet<&'static str>> = RwLock::new(BTreeSet::new());
    if let Some(n) = NAMES
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(name)
    {
        return Some(n);
    }
    let mut names = NAMES
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(n) = names.get(name) {
        return Some(n);
    }
    if names.len() >= MAX_KEYS {
        return None;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(n);
    Some(n)
}

/// One value of a key-value pair, as the type `tracing` records it as.
enum Val {
    Bool(bool),
    U64(u64),
    I64(i64),
    U128(u128),
    I128(i128),
    F64(f64),
    Str(String),
    /// slog's `None`: the field is left out of the event.
    Missing,
}

impl Val {
    fn as_value(&self) -> Option<&dyn Value> {
        Some(match self {
            Val::Bool(v) => v,
            Val::U64(v) => v,
            Val::I64(v) => v,
            Val::U128(v) => v,
            Val::I128(v) => v,
            Val::F64(v) => v,
            Val::Str(v) => v,
            Val::Missing => return None,
        })
    }
}

impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::Bool(v) => v.fmt(f),
            Val::U64(v) => v.fmt(f),
            Val::I64(v) => v.fmt(f),
            Val::U128(v) => v.fmt(f),
            Val::I128(v) => v.fmt(f),
            Val::F64(v) => v.fmt(f),
            Val::Str(v) => v.fmt(f),
            Val::Missing => f.write_str("None"),
        }
    }
}

/// A record's key-value pairs: a [`slog::Serializer`] that keeps them with their types.
#[derive(Default)]
struct Pairs {
    /// Each key is interned, or owned when [`MAX_KEYS`] are kept already.
    list: Vec<(Cow<'static, str>, Val)>,
}

impl Pairs {
    fn push(&mut self, key: Key, val: Val) -> slog::Result {
        // `Key` is `&'static str`, or a struct with slog's `dynamic-keys` feature: both
        // are `AsRef<str>`.
        #[allow(clippy::useless_asref)]
        let key: &str = key.as_ref();
        let key = if key == "message" {
            "slog.message"
        } else {
            key
        };
        let key = match intern(key) {
            Some(k) => Cow::Borrowed(k),
            None => Cow::Owned(key.to_owned()),
        };
        self.list.push((key, val));
        Ok(())
    }

    /// Keeps the first value of each key.
    fn dedup(&mut self) {
        let mut seen = BTreeSet::new();
        self.list.retain(|(k, _)| seen.insert(k.clone()));
    }

    /// The keys as call-site field names, if each is one (interned) and they fit.
    fn names(&self) -> Option<Vec<&'static str>> {
        if self.list.len() > MAX_FIELDS {
            return None;
        }
        self.list
            .iter()
            .map(|(k, _)| match k {
                Cow::Borrowed(k) => Some(*k),
                Cow::Owned(_) => None,
            })
            .collect()
    }

    /// The pairs as one string: `a=1, b=x`.
    fn joined(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.list {
            if !s.is_empty() {
                s.push_str(", ");
            }
            let _ = write!(s, "{k}={v}");
        }
        s
    }
}

macro_rules! emit {
    ($($method:ident: $ty:ty => $variant:ident,)*) => {
        $(
            fn $method(&mut self, key: Key, val: $ty) -> slog::Result {
                self.push(key, Val::$variant(val.into()))
            }
        )*
    };
}

impl slog::Serializer for Pairs {
    emit! {
        emit_bool: bool => Bool,
        emit_u8: u8 => U64,
        emit_u16: u16 => U64,
        emit_u32: u32 => U64,
        emit_u64: u64 => U64,
        emit_i8: i8 => I64,
        emit_i16: i16 => I64,
        emit_i32: i32 => I64,
        emit_i64: i64 => I64,
        emit_u128: u128 => U128,
        emit_i128: i128 => I128,
        emit_f32: f32 => F64,
        emit_f64: f64 => F64,
        emit_char: char => Str,
        emit_str: &str => Str,
    }

    fn emit_usize(&mut self, key: Key, val: usize) -> slog::Result {
        self.push(key, Val::U64(val as u64))
    }

    fn emit_isize(&mut self, key: Key, val: isize) -> slog::Result {
        self.push(key, Val::I64(val as i64))
    }

    fn emit_unit(&mut self, key: Key) -> slog::Result {
        self.push(key, Val::Str("()".into()))
    }

    fn emit_none(&mut self, key: Key) -> slog::Result {
        self.push(key, Val::Missing)
    }

    fn emit_arguments(&mut self, key: Key, val: &fmt::Arguments<'_>) -> slog::Result {
        self.push(key, Val::Str(val.to_string()))
    }
}
