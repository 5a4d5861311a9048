//! Integration tests, one binary with modules by theme.

mod advisor;
mod bad_input;
mod builtin_models;
mod cli;
mod common;
mod corpus;
mod exec_vs_ort;
mod fuzz_loader;
mod quant;
