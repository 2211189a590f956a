//! The fake kubelet (being written).
