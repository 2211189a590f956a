//! Scratch the plugins keep for one cycle, owned by the session: answers a plugin worked out
//! and reuses while the session's state allows (each keyed by what it depends on). It opens
//! empty with the session and goes with it, so no plugin carries memo state of its own from one
//! session to the next.

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;

/// The plugins' scratch of one session.
#[derive(Default)]
pub struct Scratch {
    cells: Vec<RefCell<Box<dyn Any>>>,
}

/// A plugin's handle on its value of type `T` in one session's [`Scratch`], made when the
/// plugin opens on the session.
pub struct Slot<T> {
    index: usize,
    of: PhantomData<fn() -> T>,
}

impl<T> Clone for Slot<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Slot<T> {}

impl<T> Default for Slot<T> {
    /// A slot of no session: [`Scratch::with`] lends a fresh value for it.
    fn default() -> Self {
        Slot { index: usize::MAX, of: PhantomData }
    }
}

impl Scratch {
    /// Keeps `value` for the rest of the session; the slot names it.
    pub fn slot<T: 'static>(&mut self, value: T) -> Slot<T> {
        self.cells.push(RefCell::new(Box::new(value)));
        Slot { index: self.cells.len() - 1, of: PhantomData }
    }

    /// Calls `f` with the value `slot` names. A slot of another session (or of none) is lent a
    /// fresh value instead: the answer is the same, only not kept. Values of distinct slots may
    /// be used within each other's `f`; one slot's may not.
    pub fn with<T: Default + 'static, R>(&self, slot: Slot<T>, f: impl FnOnce(&mut T) -> R) -> R {
        let kept = self.cells.get(slot.index).and_then(|cell| cell.try_borrow_mut().ok());
        match kept {
            Some(mut cell) => match cell.downcast_mut::<T>() {
                Some(value) => f(value),
                None => f(&mut T::default()),
            },
            None => f(&mut T::default()),
        }
    }
}
