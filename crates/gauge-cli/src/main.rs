fn main() { println!("gauge (skeleton)"); }
