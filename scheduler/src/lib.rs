//! Drover's scheduling core.
pub mod config;
