// window.cpp — GLFW + OpenGL 3 + Dear ImGui backends (see window.h).
#include "window.h"

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>
#include <GL/gl.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "trainscope/common/error.h"

namespace trainscope::viewer {

namespace {
std::string g_glfw_error;
void onGlfwError(int code, const char* what) { g_glfw_error = std::string(what) + " (GLFW error " + std::to_string(code) + ")"; }
// Dropped paths wait here for the frame loop (one window per process; GLFW calls back on the UI
// thread, inside poll()).
std::vector<std::string> g_dropped;
void onDrop(GLFWwindow*, int n, const char** paths) {
  for (int i = 0; i < n; ++i) g_dropped.emplace_back(paths[i]);
}

// HiDPI the way Dear ImGui's backends do it on a Retina screen: the UI is laid out in logical pixels
// (framebuffer / scale) and drawn into the framebuffer magnified by DisplayFramebufferScale, so every
// size — the views' own row heights and gutters as well as ImGui's paddings — scales alike. The font
// is rasterised at 13 × scale px and drawn at 1 / scale, so it is sharp, not a magnified 13 px.
void buildUi(float scale) {
  ImGuiIO& io = ImGui::GetIO();
  ImFontConfig font;
  font.SizePixels = std::round(13.0f * scale);
  io.Fonts->AddFontDefault(&font);
  io.FontGlobalScale = 1.0f / scale;
}
}  // namespace

Window::Window(const std::string& title, int width, int height, bool visible, float scale) {
  glfwSetErrorCallback(onGlfwError);
  if (!glfwInit())
    throw UserError("display", "cannot open a window: " + g_glfw_error,
                    "run on a desktop, set DISPLAY, or use Xvfb (xvfb-run trainscope-viewer ... --screenshot out.png)");
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_VISIBLE, visible ? GLFW_TRUE : GLFW_FALSE);
  window_ = glfwCreateWindow(width, height, title.c_str(), nullptr, nullptr);
  if (!window_) {
    glfwTerminate();
    throw UserError("display", "cannot create an OpenGL 3.3 window: " + g_glfw_error,
                    "check the OpenGL driver (glxinfo), or use Xvfb with Mesa");
  }
  glfwMakeContextCurrent(window_);
  glfwSwapInterval(visible ? 1 : 0);
  if (!(scale > 0)) {  // the monitor's: what the desktop asks applications to scale by
    float xs = 1, ys = 1;
    glfwGetWindowContentScale(window_, &xs, &ys);
    scale = std::isfinite(xs) && xs > 0 ? xs : 1.0f;
  }
  scale_ = scale;
  glfwSetDropCallback(window_, onDrop);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // no imgui.ini beside the user's files
  ImGui::StyleColorsDark();
  buildUi(scale_);
  ImGui_ImplGlfw_InitForOpenGL(window_, true);
  ImGui_ImplOpenGL3_Init("#version 330");
}

Window::~Window() {
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window_);
  glfwTerminate();
}

bool Window::shouldClose() const { return glfwWindowShouldClose(window_); }
void Window::requestClose() { glfwSetWindowShouldClose(window_, GLFW_TRUE); }
void Window::poll(double wait_s) {
  if (wait_s > 0) glfwWaitEventsTimeout(wait_s);
  else glfwPollEvents();
}
std::vector<std::string> Window::takeDropped() {
  std::vector<std::string> out;
  out.swap(g_dropped);
  return out;
}

bool Window::minimized() const { return glfwGetWindowAttrib(window_, GLFW_ICONIFIED) != 0; }

void Window::newFrame() {
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();  // sizes and the mouse in the window's pixels
  if (scale_ != 1) {          // into logical pixels (see buildUi)
    ImGuiIO& io = ImGui::GetIO();
    io.DisplaySize = ImVec2(io.DisplaySize.x / scale_, io.DisplaySize.y / scale_);
    io.DisplayFramebufferScale = ImVec2(io.DisplayFramebufferScale.x * scale_, io.DisplayFramebufferScale.y * scale_);
    if (io.MousePos.x > -FLT_MAX / 2) io.MousePos = ImVec2(io.MousePos.x / scale_, io.MousePos.y / scale_);
  }
}

void Window::render() {
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  glViewport(0, 0, w, h);
  glClearColor(24 / 255.f, 26 / 255.f, 30 / 255.f, 1.f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

void Window::swap() { glfwSwapBuffers(window_); }

int Window::width() const {
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  return w;
}
int Window::height() const {
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  return h;
}

Image Window::readPixels() const {
  Image img;
  img.width = width();
  img.height = height();
  std::vector<uint8_t> flipped(size_t(img.width) * size_t(img.height) * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, img.width, img.height, GL_RGBA, GL_UNSIGNED_BYTE, flipped.data());
  img.rgba.resize(flipped.size());
  const size_t row = size_t(img.width) * 4;
  for (int y = 0; y < img.height; ++y)  // OpenGL's rows run bottom to top
    std::copy_n(&flipped[size_t(img.height - 1 - y) * row], row, &img.rgba[size_t(y) * row]);
  return img;
}

}  // namespace trainscope::viewer
