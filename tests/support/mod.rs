pub mod cluster;
pub mod procs;
