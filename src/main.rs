//! See `paddle_launcher::run`.

fn main() {
    paddle_launcher::run::main()
}
