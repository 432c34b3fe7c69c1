// `pagellm bench serve --plot FILE.svg`: a hand-written SVG of the latency distributions and the
// output throughput over time. Layout: 2 x 2 panels of kPanelW x kPanelH pixels.
//   [ TTFT histogram ] [ ITL histogram        ]
//   [ E2EL histogram ] [ output tokens/s vs s ]
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/bench_serve.h"

namespace pagellm::cli {
namespace {

constexpr double kPanelW = 480, kPanelH = 300;
constexpr double kMarginL = 60, kMarginR = 20, kMarginT = 34, kMarginB = 44;
constexpr int kBins = 30;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::fabs(v) >= 100 || v == 0 ? "%.0f" : "%.3g", v);
  return buf;
}

std::string text(double x, double y, const std::string& s, const char* anchor = "middle") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor + "\">" + s + "</text>\n";
}

// Frame, title, axis labels and min / max ticks of one panel; returns the plot rectangle.
struct Rect {
  double x, y, w, h;
};
Rect panel(std::string* out, double ox, double oy, const std::string& title, const std::string& xlabel,
           const std::string& ylabel, double xmin, double xmax, double ymax) {
  const Rect r{ox + kMarginL, oy + kMarginT, kPanelW - kMarginL - kMarginR, kPanelH - kMarginT - kMarginB};
  *out += "<g>\n";
  *out += "<rect x=\"" + num(r.x) + "\" y=\"" + num(r.y) + "\" width=\"" + num(r.w) + "\" height=\"" + num(r.h) +
          "\" fill=\"none\" stroke=\"#444\"/>\n";
  *out += "<g font-weight=\"bold\">" + text(ox + kPanelW / 2, oy + 20, title) + "</g>\n";
  *out += text(r.x + r.w / 2, r.y + r.h + 36, xlabel);
  *out += text(r.x, r.y + r.h + 16, label(xmin), "start");
  *out += text(r.x + r.w, r.y + r.h + 16, label(xmax), "end");
  *out += text(r.x - 6, r.y + r.h, "0", "end");
  *out += text(r.x - 6, r.y + 10, label(ymax), "end");
  *out += "<text x=\"" + num(ox + 16) + "\" y=\"" + num(r.y + r.h / 2) +
          "\" text-anchor=\"middle\" transform=\"rotate(-90 " + num(ox + 16) + " " + num(r.y + r.h / 2) + ")\">" +
          ylabel + "</text>\n";
  *out += "</g>\n";
  return r;
}

void histogram(std::string* out, double ox, double oy, const std::string& title, std::vector<double> v) {
  if (v.empty()) {
    panel(out, ox, oy, title + " (no samples)", "ms", "requests", 0, 0, 0);
    return;
  }
  std::sort(v.begin(), v.end());
  const double lo = v.front();
  const double hi = std::max(v.back(), lo + 1e-9);
  std::vector<int64_t> count(kBins, 0);
  for (double x : v) ++count[std::min<int>(kBins - 1, static_cast<int>((x - lo) / (hi - lo) * kBins))];
  const int64_t cmax = *std::max_element(count.begin(), count.end());
  const Rect r = panel(out, ox, oy, title, "ms", "count", lo, hi, static_cast<double>(cmax));
  const double bw = r.w / kBins;
  *out += "<g fill=\"#4878a8\">\n";
  for (int b = 0; b < kBins; ++b) {
    if (count[b] == 0) continue;
    const double h = r.h * static_cast<double>(count[b]) / static_cast<double>(cmax);
    *out += "<rect x=\"" + num(r.x + b * bw + 0.5) + "\" y=\"" + num(r.y + r.h - h) + "\" width=\"" +
            num(std::max(bw - 1, 0.5)) + "\" height=\"" + num(h) + "\"/>\n";
  }
  *out += "</g>\n";
  // Median and p99 markers.
  for (auto [q, color] : {std::pair{50.0, "#d62728"}, std::pair{99.0, "#ff7f0e"}}) {
    const double x = r.x + (percentile(v, q) - lo) / (hi - lo) * r.w;
    *out += "<line x1=\"" + num(x) + "\" y1=\"" + num(r.y) + "\" x2=\"" + num(x) + "\" y2=\"" + num(r.y + r.h) +
            "\" stroke=\"" + color + "\" stroke-dasharray=\"4 3\"/>\n";
  }
  *out += "<g font-size=\"11\">" + text(r.x + r.w - 4, r.y + 14, "median " + label(percentile(v, 50)) + " ms", "end") +
          text(r.x + r.w - 4, r.y + 28, "p99 " + label(percentile(v, 99)) + " ms", "end") + "</g>\n";
}

// Output tokens per second in kBins buckets over the run (chunks counted where they arrive).
void throughput(std::string* out, double ox, double oy, const BenchRun& run) {
  const double dur = std::max(run.duration_s, 1e-9);
  std::vector<double> tokens(kBins, 0);
  for (const RequestResult& r : run.results) {
    if (!r.success) continue;
    for (double t : r.chunk_s) {
      const int b = std::clamp(static_cast<int>((r.start_s + t) / dur * kBins), 0, kBins - 1);
      tokens[b] += 1;
    }
  }
  const double bucket_s = dur / kBins;
  double ymax = 0;
  for (double& t : tokens) ymax = std::max(ymax, t /= bucket_s);
  ymax = std::max(ymax, 1e-9);
  const Rect r =
      panel(out, ox, oy, "Output throughput over time", "time since start (s)", "text chunks/s", 0, dur, ymax);
  std::string pts;
  for (int b = 0; b < kBins; ++b) {
    const double x = r.x + (b + 0.5) * r.w / kBins;
    const double y = r.y + r.h - r.h * tokens[b] / ymax;
    pts += num(x) + "," + num(y) + " ";
  }
  *out += "<polyline fill=\"none\" stroke=\"#2ca02c\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
}

}  // namespace

std::string plot_svg(const BenchRun& run) {
  std::vector<double> ttft, itl, e2el;
  for (const RequestResult& r : run.results) {
    if (!r.success) continue;
    ttft.push_back(r.ttft_s * 1e3);
    e2el.push_back(r.e2el_s * 1e3);
    for (size_t i = 1; i < r.chunk_s.size(); ++i) itl.push_back((r.chunk_s[i] - r.chunk_s[i - 1]) * 1e3);
  }
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(2 * kPanelW) + "\" height=\"" + num(2 * kPanelH) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  histogram(&out, 0, 0, "Time to first token", ttft);
  histogram(&out, kPanelW, 0, "Inter-token latency", itl);
  histogram(&out, 0, kPanelH, "End-to-end latency", e2el);
  throughput(&out, kPanelW, kPanelH, run);
  out += "</svg>\n";
  return out;
}

}  // namespace pagellm::cli
