pub mod checker;
pub mod cluster;
pub mod procs;
