//! The command-line reference page of the user guide (`docs/src/reference/cli.md`), rendered
//! from the clap definitions above: every command's `--help`, as the binary prints it. The
//! docs test `docs::the_cli_reference_is_generated_from_clap` fails when the committed page
//! differs, and says how to regenerate it.

use clap::CommandFactory;

use super::Cli;

/// The page: a section per command and subcommand, each its long help.
pub fn markdown() -> String {
    let mut root = Cli::command().term_width(100);
    root.build();
    let mut out = String::from(
        "# Command-line reference\n\n\
         <!-- Generated from the clap definitions in src/cli/mod.rs; do not edit. Regenerate with\n\
         IDEMLAKE_BLESS=1 cargo test --test it docs::the_cli_reference_is_generated_from_clap -->\n\n\
         This page is `idemlake --help` and `idemlake <command> --help`, generated from the\n\
         definitions the binary parses its arguments with. The global options (`--project`,\n\
         `--lake`, `--output`, `--engine`, …) are listed once, under `idemlake`; they go before\n\
         or after the command.\n",
    );
    section(&mut out, &root, "idemlake", 2);
    out
}

fn section(out: &mut String, cmd: &clap::Command, path: &str, depth: usize) {
    let mut cmd = cmd.clone();
    if depth > 2 {
        // The global options are listed once, under `idemlake`.
        cmd = cmd.mut_args(|a| match a.is_global_set() {
            true => a.hide(true),
            false => a,
        });
    }
    let help = cmd.render_long_help().to_string();
    out.push_str(&format!(
        "\n{} `{path}`\n\n```text\n{}\n```\n",
        "#".repeat(depth.min(4)),
        help.trim_end()
    ));
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" || sub.is_hide_set() {
            continue;
        }
        section(out, sub, &format!("{path} {}", sub.get_name()), depth + 1);
    }
}
