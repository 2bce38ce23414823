#include <tessera/tessera.h>
int main(int argc, char** argv) {
  tessera::Result<tessera::Runtime> rt = tessera::connect("local");
  if (!rt.ok()) return 1;
  for (const tessera::DeviceInfo& d : rt->devices()) std::printf("%s %d\n", d.kind.c_str(), d.veus);
  tessera::Result<tessera::Model> m = rt->compile(argv[1], {.shapes = {}});
  if (!m.ok()) { std::fprintf(stderr, "%s\n", m.status().to_string().c_str()); return 1; }
  for (const tessera::TensorInfo& i : m->inputs()) std::printf("in %s\n", i.name.c_str());
  tessera::Result<tessera::NamedTensors> in = tessera::load_npz(argv[2]);
  tessera::Result<tessera::Session> s = m->session({.device = "cpu", .veus = 2});
  tessera::Result<tessera::NamedTensors> out = s->run(*in);
  if (!out.ok()) return 1;
  for (const auto& [name, t] : *out) {          // model order
    std::printf("%s %s %zu\n", name.c_str(), tessera::dtype_name(t.dtype()).data(), t.shape().size());
    (void)t.save_npy(std::string(argv[3]) + "/" + name + ".npy");
  }
  tessera::Event e = s->submit(*in);           // asynchronous; the caller's thread is free
  if (!e.wait().ok()) return 1;
  return m->save(std::string(argv[3]) + "/model.tsx").ok() ? 0 : 1;
}
