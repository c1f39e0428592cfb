// Teardown errors: a failure that happens while an object is destroyed (a plugin's close that
// reports a double release, a Python implementation's close() that raises) cannot be thrown from
// a destructor. The destructor records it here instead, and whoever owns the case the object
// lived in takes it: run_check turns what a run of a property recorded into a failure of that run,
// a driver-faults scenario into a "close failed" row, and a plugin's close entry (the C++ plugin
// SDK) into the error it returns across the ABI.
//
// The record is per thread: an object destroyed on a thread records on that thread. What nobody
// took is printed to stderr when the thread ends, so no teardown failure goes unseen.
#pragma once

#include <string>
#include <vector>

namespace offloadkit {

/// Records a teardown failure on this thread: "<what was torn down>: close failed: <why>". Never
/// throws (destructors call it); if the record cannot grow, the message is printed to stderr.
void record_teardown_error(std::string message) noexcept;

/// The teardown failures recorded on this thread since the last take, oldest first; clears them.
std::vector<std::string> take_teardown_errors() noexcept;

/// The failures as one message, one per line ("" for none).
std::string join_teardown_errors(const std::vector<std::string>& errors);

}  // namespace offloadkit
