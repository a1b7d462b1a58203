// The API reference at /docs: Redoc (vendored) over the OpenAPI document the element
// names. A script file of its own, as the Content-Security-Policy allows no inline one.
// The theme's colours meet WCAG AA contrast (Redoc's defaults do not, in its code
// spans and response tabs).
document.addEventListener("DOMContentLoaded", () => {
  const element = document.getElementById("reference");
  const label = () => {
    // Redoc's media-type pickers carry no label; name them for assistive technology.
    for (const select of element.querySelectorAll("select:not([aria-label])")) {
      select.setAttribute("aria-label", "Media type");
    }
  };
  new MutationObserver(label).observe(element, { childList: true, subtree: true });
  Redoc.init(
    element.dataset.spec,
    {
      expandResponses: "200,201",
      jsonSampleExpandLevel: 2,
      theme: {
        colors: {
          primary: { main: "#1f4f8f" },
          success: { main: "#1a6b2a" },
          error: { main: "#b3261e" },
          warning: { main: "#7a5000" },
          text: { primary: "#1b1f24", secondary: "#3d4450" },
          responses: {
            success: { color: "#1a6b2a", backgroundColor: "#eef8f0", tabTextColor: "#1a6b2a" },
            error: { color: "#b3261e", backgroundColor: "#fdf0f0", tabTextColor: "#b3261e" },
            redirect: { color: "#7a5000", backgroundColor: "#fff8e6", tabTextColor: "#7a5000" },
            info: { color: "#1f4f8f", backgroundColor: "#eef3fb", tabTextColor: "#1f4f8f" },
          },
          http: {
            get: "#1a6b2a", post: "#1f4f8f", put: "#6b3fa0", options: "#5c4a00",
            patch: "#8a4b00", delete: "#b3261e", basic: "#4a4a4a", link: "#1f6f7f",
            head: "#7a2a5a",
          },
        },
        typography: { code: { color: "#9c1c1c", backgroundColor: "rgba(38, 50, 56, 0.05)" } },
      },
    },
    element,
    label,
  );
});
