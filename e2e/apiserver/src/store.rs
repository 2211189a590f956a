//! The object store: one table per resource (keyed by namespace/name), a single cluster-wide
//! resourceVersion counter, and the bounded event history that watches resume from.
//!
//! Every write goes through [`Store::put`] or [`Store::remove`], which bump the
//! resourceVersion, record the event and broadcast it to live watches, all under the caller's
//! lock so that a watch started under the same lock sees no gap and no duplicate.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use crate::meta::metadata_mut;
use crate::registry::Registry;

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// The wire name (`ADDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// Storage key of the resource.
    pub key: Arc<str>,
    /// Namespace of the object ("" for cluster-scoped).
    pub namespace: String,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (for DELETED, the last state with the deletion rv).
    pub object: Arc<Value>,
    /// The object before the change (MODIFIED only), so selector watches can turn a change
    /// into ADDED or DELETED as the real watch cache does.
    pub prev: Option<Arc<Value>>,
}

/// Namespace and name; namespace is "" for cluster-scoped objects.
pub type ObjKey = (String, String);

/// Why a watch cannot start at the asked resourceVersion.
#[derive(Debug)]
pub struct TooOld {
    /// The oldest resourceVersion a watch can still resume from.
    pub oldest: u64,
}

/// A watch resumed from a resourceVersion: the kept events after it, then a receiver.
pub type Resume = (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>);

/// The whole cluster state.
pub struct Store {
    rv: u64,
    tables: HashMap<String, BTreeMap<ObjKey, Arc<Value>>>,
    history: VecDeque<Arc<Event>>,
    history_cap: usize,
    /// Events with rv <= compacted are gone from history.
    compacted: u64,
    tx: broadcast::Sender<Arc<Event>>,
    /// The served types (changes with CRDs).
    pub registry: Registry,
}

const BROADCAST_CAPACITY: usize = 1 << 17;

impl Store {
    /// An empty store keeping `history_cap` events for watch resume.
    pub fn new(history_cap: usize) -> Self {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Store {
            rv: 0,
            tables: HashMap::new(),
            history: VecDeque::new(),
            history_cap: history_cap.max(1),
            compacted: 0,
            tx,
            registry: Registry::builtins(),
        }
    }

    /// The current (latest) resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// Sets the counter and compaction point after loading a state file: no history survives.
    pub fn set_loaded_rv(&mut self, rv: u64) {
        self.rv = self.rv.max(rv);
        self.compacted = self.rv;
    }

    /// An object by key.
    pub fn get(&self, key: &str, ns: &str, name: &str) -> Option<&Arc<Value>> {
        self.tables.get(key)?.get(&(ns.to_string(), name.to_string()))
    }

    /// Objects of a resource, optionally in one namespace, in key order.
    pub fn list<'a>(&'a self, key: &str, ns: Option<&'a str>) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        let table = self.tables.get(key);
        let range: Box<dyn Iterator<Item = (&ObjKey, &Arc<Value>)>> = match (table, ns) {
            (None, _) => Box::new(std::iter::empty()),
            (Some(t), None) => Box::new(t.iter()),
            (Some(t), Some(ns)) => {
                Box::new(t.range((ns.to_string(), String::new())..).take_while(move |((n, _), _)| n == ns))
            }
        };
        range.map(|(_, v)| v)
    }

    /// Every storage key with objects (for persistence).
    pub fn keys(&self) -> Vec<String> {
        self.tables.keys().cloned().collect()
    }

    /// Writes an object (create or update), assigning the next resourceVersion. Returns it.
    pub fn put(&mut self, key: &str, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        metadata_mut(&mut obj).insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        let ns = crate::meta::meta_str(&obj, "namespace").to_string();
        let name = crate::meta::meta_str(&obj, "name").to_string();
        let obj = Arc::new(obj);
        let prev = self.tables.entry(key.to_string()).or_default().insert((ns.clone(), name), obj.clone());
        let kind = if prev.is_some() { EventType::Modified } else { EventType::Added };
        self.publish(key, ns, kind, obj.clone(), prev);
        obj
    }

    /// Inserts an object as loaded from a state file: no event, resourceVersion kept.
    pub fn load(&mut self, key: &str, obj: Value) {
        let ns = crate::meta::meta_str(&obj, "namespace").to_string();
        let name = crate::meta::meta_str(&obj, "name").to_string();
        self.tables.entry(key.to_string()).or_default().insert((ns, name), Arc::new(obj));
    }

    /// Removes an object, assigning the next resourceVersion to its final state. Returns it.
    pub fn remove(&mut self, key: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        let old = self.tables.get_mut(key)?.remove(&(ns.to_string(), name.to_string()))?;
        self.rv += 1;
        let mut last = (*old).clone();
        metadata_mut(&mut last).insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        let last = Arc::new(last);
        self.publish(key, ns.to_string(), EventType::Deleted, last.clone(), None);
        Some(last)
    }

    fn publish(&mut self, key: &str, namespace: String, kind: EventType, object: Arc<Value>, prev: Option<Arc<Value>>) {
        let ev = Arc::new(Event { rv: self.rv, key: Arc::from(key), namespace, kind, object, prev });
        if self.history.len() == self.history_cap {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
        self.history.push_back(ev.clone());
        // No receiver is not an error: nobody is watching.
        let _ = self.tx.send(ev);
    }

    /// Starts a watch after `rv`: the kept events newer than `rv` and a receiver for later ones.
    pub fn watch_from(&self, rv: u64) -> Result<Resume, TooOld> {
        if rv < self.compacted {
            return Err(TooOld { oldest: self.compacted });
        }
        let start = self.history.partition_point(|e| e.rv <= rv);
        Ok((self.history.range(start..).cloned().collect(), self.tx.subscribe()))
    }

    /// A receiver for events after the current resourceVersion.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }
}
