//! Who robotsgate's requests say they are: Web Bot Auth signing identities
//! (draft-ietf-webbotauth-httpsig-protocol). The fleet's private keys live here, in one
//! process the crawlers reach through, instead of in every crawler: an identity's key
//! ([`key`]) signs each request it is chosen for ([`signer`]), and its key directory is
//! what the operator publishes at the identity's `signature_agent` URL.
//!
//! Uses [`crate::config`] only.

pub mod key;
pub mod payment;
pub mod signer;

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::SigningConfig;
pub use key::KeyError;
pub use signer::{Identity, Signed};

/// The signing identities, by name: read once at start, their keys loaded.
#[derive(Default)]
pub struct Identities {
    by_name: HashMap<String, Arc<Identity>>,
}

impl Identities {
    /// Loads every identity's keys: an unreadable or malformed key file is an error
    /// naming the identity and the file (never the key).
    pub fn load(config: &SigningConfig) -> Result<Identities, KeyError> {
        let mut by_name = HashMap::new();
        for identity in &config.identities {
            let key = key::SigningKey::load(&identity.key_file, &identity.name)?;
            let next = identity
                .next_key_file
                .as_deref()
                .map(|path| key::SigningKey::load(path, &identity.name))
                .transpose()?;
            let signer = Identity::new(
                identity.name.clone(),
                key,
                next,
                &identity.signature_agent,
                config.signature_agent_form,
                identity.expires_seconds.duration(),
            )
            .paying(
                identity
                    .payment
                    .as_ref()
                    .map(|p| payment::Budget::new(p.max_price.clone(), p.daily_budget.clone())),
            );
            by_name.insert(identity.name.clone(), Arc::new(signer));
        }
        Ok(Identities { by_name })
    }

    /// Every identity, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Identity>> {
        self.by_name.values()
    }

    /// The identity called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Identity>> {
        self.by_name.get(name)
    }
}
