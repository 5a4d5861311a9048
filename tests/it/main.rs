//! Integration tests, one binary with modules by theme.

mod bad_input;
mod builtin_models;
mod cli;
mod common;
mod corpus;
mod fuzz_loader;
