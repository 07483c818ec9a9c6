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

step "every installed header compiles on its own"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cflags=$(pkg-config --cflags conccl)
for h in "$prefix"/include/conccl/*.hpp "$prefix"/include/conccl/packets/*.hpp; do
  rel=${h#"$prefix"/include/}
  echo "#include <$rel>" | g++ -std=c++20 -Wall -Wextra -fsyntax-only -x c++ $cflags - \
    || { echo "not self-contained: $rel"; exit 1; }
done
echo '#include <conccl/conccl.h>' | gcc -std=c99 -Wall -Wextra -pedantic -Werror -fsyntax-only -x c $cflags -

step "CMake consumer (find_package, conccl::conccl): examples/transport_c"
cmake -S "$src/examples/transport_c" -B "$work/transport" -DCMAKE_PREFIX_PATH="$prefix" > "$work/cfg1.log"
cmake --build "$work/transport" > "$work/build1.log"
"$work/transport/transport"

step "CMake consumer, static (conccl::conccl_static): examples/collective_c"
cmake -S "$src/examples/collective_c" -B "$work/coll" -DCMAKE_PREFIX_PATH="$prefix" -DCONCCL_STATIC=ON > "$work/cfg2.log"
cmake --build "$work/coll" > "$work/build2.log"
"$work/coll/allgather"

step "Makefile consumer (pkg-config): examples/transport_c"
cp -r "$src/examples/transport_c" "$work/mk"
make -C "$work/mk" -s CFLAGS=-Werror transport
LD_LIBRARY_PATH=$prefix/lib "$work/mk/transport"

if command -v python3 > /dev/null; then
  step "Python package against the installed library"
  LD_LIBRARY_PATH=$prefix/lib PYTHONPATH=$src/python python3 "$src/examples/python/allgather.py"
fi
echo "install test: all consumers built and verified"
