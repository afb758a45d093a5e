//! A store of our own, for `StoreBackend`: a map from key to its states,
//! under one lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tower_ratelimit::backend::{KeyStates, StateStore};
use tower_ratelimit::key::Key;

/// The whole store: a map from key to its states, under one lock.
#[derive(Clone, Default)]
pub struct Map(Arc<Mutex<HashMap<Key, KeyStates>>>);

impl StateStore for Map {
    fn update<R>(&self, key: &Key, change: impl FnOnce(&mut KeyStates) -> R) -> R {
        let mut map = self.0.lock().unwrap();
        let states = map.entry(key.clone()).or_default();
        let answer = change(states);
        if states.is_empty() {
            map.remove(key);
        }
        answer
    }

    fn keys(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}
