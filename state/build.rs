// `sqlx::migrate!` embeds state/migrations at compile time; without this,
// cargo would not rebuild the crate when a migration is added or edited
// (sqlx's documented advice for the macro).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
