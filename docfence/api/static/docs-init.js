// Starts Swagger UI on /docs from files served by docfence itself (no CDN; the page's CSP allows
// scripts from this origin only, so the start-up code lives here rather than inline).
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true });
});
