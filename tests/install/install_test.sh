#!/usr/bin/env bash
# tests/install/install_test.sh BUILD_DIR SOURCE_DIR - see CMakeLists.txt here.
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
step() { echo "== $*"; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/conccl/conccl.h include/conccl/collectives.hpp include/conccl/packets/sdma_codec.hpp \
         lib/libconccl.a bin/sdma-probe; do
  [[ -e $prefix/$f ]] || { echo "missing after install: $f"; exit 1; }
done
ls "$prefix"/lib/libconccl.so.0* > /dev/null
so=$(ls "$prefix"/lib/libconccl.so.0.*)
soname=$(objdump -p "$so" | awk '/SONAME/ {print $2}')
[[ $soname == libconccl.so.0 ]] || { echo "soname is '$soname', expected libconccl.so.0"; exit 1; }
"$prefix/bin/sdma-probe" --version

step "the install exports <prefix>/include alone"
# Consumers get -I<prefix>/include and nothing under it: a directory such as
# <prefix>/include/conccl would put bare names (status.hpp, queue.hpp,
# packets/...) on every user's include path.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
incdir=$(realpath "$prefix/include")
cflags=$(pkg-config --cflags conccl)
for flag in $cflags; do
  [[ $flag == -I* ]] || { echo "conccl.pc: unexpected Cflags entry '$flag' (Cflags: '$cflags')"; exit 1; }
  [[ $(realpath -m "${flag#-I}") == "$incdir" ]] \
    || { echo "conccl.pc exports '${flag#-I}': only $prefix/include belongs in Cflags"; exit 1; }
done
[[ -n $cflags ]] || { echo "conccl.pc has no Cflags"; exit 1; }
targets=$prefix/lib/cmake/conccl/concclTargets.cmake
dirs=$(grep -h 'INTERFACE_INCLUDE_DIRECTORIES' "$targets" || true)
[[ -n $dirs ]] || { echo "$targets sets no INTERFACE_INCLUDE_DIRECTORIES"; exit 1; }
while read -r line; do
  [[ $line == 'INTERFACE_INCLUDE_DIRECTORIES "${_IMPORT_PREFIX}/include"' ]] \
    || { echo "$targets: '$line': only \${_IMPORT_PREFIX}/include belongs there"; exit 1; }
done <<< "$dirs"

step "every installed header includes its siblings as conccl/... and compiles with -I<prefix>/include alone"
mapfile -t headers < <(cd "$prefix/include" && find conccl -type f \( -name '*.hpp' -o -name '*.h' \) | sort)
expected=$( (cd "$src" && ls include/conccl/*.hpp include/conccl/*.h packets/*.hpp) | wc -l)
(( ${#headers[@]} == expected )) \
  || { echo "${#headers[@]} headers installed, the source tree has $expected: ${headers[*]}"; exit 1; }
for rel in "${headers[@]}"; do
  # A quoted include of a bare name can resolve next to the including file
  # ("packets/x.hpp" from conccl/commands.hpp) and still be wrong: every
  # include of a project header names it from <prefix>/include.
  bad=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$prefix/include/$rel" \
        | grep -vE '#[[:space:]]*include[[:space:]]*"conccl/' || true)
  [[ -z $bad ]] || { echo "$rel includes a project header by a name outside conccl/:"; echo "$bad"; exit 1; }
  echo "#include <$rel>" | g++ -std=c++20 -Wall -Wextra -Werror -fsyntax-only -x c++ -I"$prefix/include" - \
    || { echo "does not compile with -I$prefix/include alone: $rel"; exit 1; }
done
echo '#include <conccl/conccl.h>' | gcc -std=c99 -Wall -Wextra -pedantic -Werror -fsyntax-only -x c -I"$prefix/include" -

step "CMake consumer (find_package, conccl::conccl): examples/transport_c"
cmake -S "$src/examples/transport_c" -B "$work/transport" -DCMAKE_PREFIX_PATH="$prefix" > "$work/cfg1.log"
cmake --build "$work/transport" > "$work/build1.log"
"$work/transport/transport"

step "CMake consumer, static (conccl::conccl_static): examples/collective_c"
cmake -S "$src/examples/collective_c" -B "$work/coll" -DCMAKE_PREFIX_PATH="$prefix" -DCONCCL_STATIC=ON > "$work/cfg2.log"
cmake --build "$work/coll" > "$work/build2.log"
"$work/coll/allgather"

step "C++ consumer (find_package, conccl::conccl; the C++20 the headers need comes with the target): examples/collective_cpp"
cmake -S "$src/examples/collective_cpp" -B "$work/cpp" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror" > "$work/cfg4.log"
cmake --build "$work/cpp" > "$work/build4.log" || { cat "$work/build4.log"; exit 1; }
"$work/cpp/collectives"

if pkg-config --exists ucx; then
  step "collectives across nodes, UCX between them (CMake consumer): examples/hier_ucx, 2 x 2 ranks"
  cmake -S "$src/examples/hier_ucx" -B "$work/hier" -DCMAKE_PREFIX_PATH="$prefix" > "$work/cfg3.log"
  cmake --build "$work/hier" > "$work/build3.log"
  "$work/hier/hier_ucx" 2 2
else
  echo "install test: UCX's development files are missing: examples/hier_ucx not built (apt-get install libucx-dev)"
fi

step "Makefile consumer (pkg-config): examples/transport_c"
cp -r "$src/examples/transport_c" "$work/mk"
make -C "$work/mk" -s CFLAGS=-Werror transport
LD_LIBRARY_PATH=$prefix/lib "$work/mk/transport"

if command -v python3 > /dev/null; then
  step "Python package against the installed library"
  LD_LIBRARY_PATH=$prefix/lib PYTHONPATH=$src/python python3 "$src/examples/python/allgather.py"
fi
echo "install test: all consumers built and verified"
