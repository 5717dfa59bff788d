#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| compactd_fuzz::rpc_message::check(data));
