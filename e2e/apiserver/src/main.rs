//! `drover-apiserver`: the Kubernetes API emulator as a process.
fn main() {}
