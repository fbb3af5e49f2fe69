pub mod cluster;
pub mod kit;
pub mod netns;
pub mod procs;

/// The history checker, as the tests have always named it (it is the kit's).
pub use kit::checker;
