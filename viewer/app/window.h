// window.h — the one wrapper around GLFW and OpenGL (nobody else in the viewer includes their
// headers): a window with an OpenGL 3 context and Dear ImGui's GLFW + OpenGL3 backends on it,
// the frame loop's calls, and reading the frame back for --screenshot.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainscope/viewer/image.h"

struct GLFWwindow;

namespace trainscope::viewer {

class Window {
 public:
  // Throws UserError when there is no display or no OpenGL 3 (with the fix: a DISPLAY, or Xvfb).
  // `scale` > 0 magnifies the whole UI by that factor (fonts rebuilt sharp at the size; the views
  // lay out in logical pixels, window pixels / scale); 0 takes the monitor's content scale
  // (glfwGetWindowContentScale: 2 on a typical HiDPI screen, 1 under Xvfb).
  Window(const std::string& title, int width, int height, bool visible, float scale = 0);
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  bool shouldClose() const;
  void requestClose();
  // Polls events (waits up to `wait_s` when nothing is animating, to keep an idle viewer at 0% CPU).
  void poll(double wait_s);
  bool minimized() const;
  void newFrame();        // backends' NewFrame (call before ImGui::NewFrame)
  void render();          // clear, draw ImGui's draw data
  void swap();
  Image readPixels() const;  // the frame just rendered (before swap)
  int width() const;
  int height() const;
  float scale() const { return scale_; }  // the factor the UI was built at
  // Paths dropped onto the window since the last call (GLFW's drop callback), oldest first.
  std::vector<std::string> takeDropped();

 private:
  GLFWwindow* window_ = nullptr;
  float scale_ = 1;
};

}  // namespace trainscope::viewer
