//! `roofline`: why a neural network is slow on a given piece of hardware, what to change, and
//! proof by running it. See ARCHITECTURE.md for the layers and their invariants.

pub mod advisor;
pub mod analysis;
pub mod bench;
pub mod builtin;
pub mod calibrate;
pub mod device;
pub mod exec;
pub mod fsio;
pub mod heap;
pub mod kernels;
pub mod probe;
pub mod report;
