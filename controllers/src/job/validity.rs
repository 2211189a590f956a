//! Whether a Job's references resolve (its queue, its bounds, its elastic sizing): the answer
//! each check gives and the planner reads.

/// Whether the job's references resolve: `Err((reason, message))` when they do not.
pub type Validity = Result<(), (String, String)>;
