// tools/sdma-probe/main.cpp - sdma-probe entry point. Subcommands live in
// cmd_*.cpp and register themselves (see cli.hpp).
#include "cli.hpp"

int main(int argc, char** argv) { return probe::main_entry(argc, argv); }
