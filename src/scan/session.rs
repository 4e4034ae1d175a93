//! A window's session: the runner's base session with the window's shared sources swapped for
//! in-memory slices, and the window's configuration (its share of the cores, its batch size).
//!
//! Building a DataFusion `SessionContext` registers every built-in function anew; a window that
//! binds prepared plans needs none of that, only its tables and a session state to plan the
//! physical execution in. So a window session is kept as the parts — base session, slices,
//! configuration — and a full context is built only for a window that plans on its own.
//!
//! Invariant: whichever way it is used, a window sees the same tables: the slices under the
//! shared sources' names (in the default schema), everything else as in the base session.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::common::TableReference;
use datafusion::execution::SessionState;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::error::Result;

/// Tables by name in the default schema.
type Tables = HashMap<String, Arc<dyn TableProvider>>;

/// The tables and configuration one window runs with.
pub struct WindowSession {
    base: SessionContext,
    /// `None`: the base session as it is.
    window: Option<(SessionConfig, Tables)>,
    /// Aliases read from a shared slice, for logs.
    pub shared: Vec<String>,
}

impl WindowSession {
    /// The base session unchanged.
    pub fn base(base: &SessionContext) -> WindowSession {
        WindowSession {
            base: base.clone(),
            window: None,
            shared: Vec::new(),
        }
    }

    /// `base` with `slices` in place of the sources of those names, run with `config`.
    pub fn with_slices(
        base: &SessionContext,
        config: SessionConfig,
        slices: Tables,
    ) -> WindowSession {
        let mut shared: Vec<String> = slices.keys().cloned().collect();
        shared.sort();
        WindowSession {
            base: base.clone(),
            window: Some((config, slices)),
            shared,
        }
    }

    /// The table `name` refers to in this window.
    pub async fn provider(&self, name: &TableReference) -> Result<Arc<dyn TableProvider>> {
        if let Some((config, slices)) = &self.window {
            let catalog = &config.options().catalog;
            let local = match name {
                TableReference::Bare { table } => Some(table),
                TableReference::Partial { schema, table } => {
                    (**schema == catalog.default_schema).then_some(table)
                }
                TableReference::Full {
                    catalog: c,
                    schema,
                    table,
                } => (**c == catalog.default_catalog && **schema == catalog.default_schema)
                    .then_some(table),
            };
            if let Some(p) = local.and_then(|t| slices.get(t.as_ref())) {
                return Ok(p.clone());
            }
        }
        Ok(self.base.table_provider(name.clone()).await?)
    }

    /// A session state to plan this window's physical execution in (the base session's
    /// functions and catalog, this window's configuration). Its catalog still names the
    /// sources themselves: plans get their tables from [`Self::provider`].
    pub fn state(&self) -> SessionState {
        let mut state = self.base.state();
        if let Some((config, _)) = &self.window {
            *state.config_mut() = config.clone();
        }
        state
    }

    /// A full session for this window, its tables registered (for planning from SQL).
    pub async fn context(&self) -> Result<SessionContext> {
        let Some((config, slices)) = &self.window else {
            return Ok(self.base.clone());
        };
        let ctx = SessionContext::new_with_config_rt(config.clone(), self.base.runtime_env());
        for alias in super::base_tables(&self.base) {
            let provider = match slices.get(&alias) {
                Some(p) => p.clone(),
                None => self.base.table_provider(alias.as_str()).await?,
            };
            ctx.register_table(alias.as_str(), provider)?;
        }
        Ok(ctx)
    }
}
