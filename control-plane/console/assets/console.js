// The console's own script: copy buttons. Everything else is plain HTML and htmx.
// A button with data-copy="ID" copies the value of the element with that id.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source) return;
  navigator.clipboard.writeText(source.value).then(
    () => { button.textContent = "Copied"; },
    () => { source.select(); button.textContent = "Press Ctrl+C to copy"; },
  );
});
