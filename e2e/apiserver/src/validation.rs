//! Custom resource validation against a CRD's openAPIV3Schema (being written).
