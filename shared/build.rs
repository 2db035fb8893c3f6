// `sqlx::migrate!` embeds the migrations at compile time; rebuild when
// they change, not only when Rust code does.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
