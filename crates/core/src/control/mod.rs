//! The job's control channel as data and decisions: the messages (`message`), what a launcher
//! hears and knows (`heard`), the coordinator's machine (`coordinator`) and the follower's
//! (`following`). The sockets, frames and tasks are the shell's `control`.

pub mod coordinator;
pub mod following;
pub mod heard;
pub mod message;
