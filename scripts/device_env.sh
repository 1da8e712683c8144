# Sourced by the device_*.sh scripts on the GPU machine (device tool, .gl and .devlibs
# carried): unpacks the carried Vulkan loader and GL dispatch packages (and those of
# EXTRA_DEBS, a folder, e.g. Open MPI's for a build with MPI), points the loader at NVIDIA's
# driver and the carried libraries (wgpu-native) first. With BUNDLE (a tar.xz of bin/ and lib/
# built on the CPU machine) set, unpacks it into D (default /tmp/wgml_bundle), its lib/ first.
for f in .gl/*.deb ${EXTRA_DEBS:+$EXTRA_DEBS/*.deb}; do dpkg -x "$f" / 2>/dev/null; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=$PWD/.devlibs:${LD_LIBRARY_PATH:-} XDG_RUNTIME_DIR=/tmp
if [ -n "${BUNDLE:-}" ]; then
  D=${D:-/tmp/wgml_bundle}
  rm -rf "$D" && mkdir -p "$D" && tar -xJf "$BUNDLE" -C "$D"
  export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH
fi
