# Cross-compiling for arm64 Linux on a Debian x86-64 machine: Debian's g++-aarch64-linux-gnu, the
# arm64 libraries of Debian multiarch (dpkg --add-architecture arm64; libopenblas-dev:arm64 etc.,
# under /usr/lib/aarch64-linux-gnu) and qemu-user to run what is built (ctest, gtest discovery).
# Use: cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# scripts/test_arm64.sh installs the packages, configures, builds and runs the tests with it.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: libraries under /usr/lib/aarch64-linux-gnu, arch-specific headers under
# /usr/include/aarch64-linux-gnu, everything else (header-only packages, CMake and pkg-config
# files of architecture-independent packages) shared with the host under /usr.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# Programs built for arm64 run under user-mode qemu with the emulated CPU's every extension
# (-cpu max: the neon_dot level's dot product included), loaded by multiarch's arm64 loader and C
# library (libc6:arm64, /lib/ld-linux-aarch64.so.1) which is what they link against. Not with
# `-L /usr/aarch64-linux-gnu`: that prefix holds the cross toolchain's own loader, which then
# loads multiarch's libc.so.6 of another build through the shared ld.so.cache, and the first
# pthread_create never returns.
# OpenBLAS's own worker threads stay off (its start-up under emulation spins for a minute and
# more with them) and idle OpenMP workers sleep.
find_program(SNAPKV_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR /usr/bin/env OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
                                  ${SNAPKV_QEMU_AARCH64} -cpu max)
