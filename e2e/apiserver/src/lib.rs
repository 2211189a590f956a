//! A Kubernetes API emulator for hermetic end-to-end tests and a local playground.
//!
//! It serves, over plain HTTP on loopback, the subset of the Kubernetes API that Drover and
//! kubectl use, faithfully or not at all (a request outside the subset gets a clear error).
//! A fake kubelet registers nodes and runs bound pods. See `docs/apiserver.md` for exactly
//! what is emulated. Drover itself targets real Kubernetes and must not depend on anything
//! only this emulator does.

pub mod kubelet;
pub mod validation;
